"""HPACK decoding, checked against an independent implementation (the hpack package)
and the RFC 7541 example; broken header blocks are refused, never half-read."""

from __future__ import annotations

import random

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_nats._hpack import HpackDecoder, HpackError, encode_headers, huffman_decode

Headers = list[tuple[str, str]]


def encoded(encoder: hpack.Encoder, headers: Headers, *, huffman: bool) -> bytes:
    pairs = [(name.encode(), value.encode("latin-1")) for name, value in headers]
    return bytes(encoder.encode(pairs, huffman=huffman))


def test_rfc7541_request_example_with_huffman() -> None:
    # RFC 7541 C.4.1: the first request of the Huffman-coded example.
    block = bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")
    assert HpackDecoder().decode(block) == [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "www.example.com"),
    ]


def test_every_byte_value_through_huffman() -> None:
    text = bytes(range(256)) * 2
    coded = hpack.huffman.HuffmanEncoder(
        hpack.huffman_constants.REQUEST_CODES, hpack.huffman_constants.REQUEST_CODES_LENGTH
    ).encode(text)
    assert huffman_decode(coded) == text


def test_a_connection_worth_of_blocks_matches_hpack() -> None:
    # One decoder follows one encoder across many blocks: dynamic-table entries,
    # evictions and size changes must stay in step.
    rng = random.Random(3)
    encoder = hpack.Encoder()
    decoder = HpackDecoder()
    names = [":status", "content-type", "grpc-status", "grpc-message", "date"]
    for round_ in range(2000):
        if round_ % 97 == 0:
            encoder.header_table_size = rng.choice([0, 64, 256, 4096])
        headers = [
            (
                rng.choice([*names, f"x-h{rng.randrange(40)}"]),
                "".join(chr(rng.randrange(256)) for _ in range(rng.randrange(60))),
            )
            for _ in range(rng.randrange(1, 7))
        ]
        assert decoder.decode(encoded(encoder, headers, huffman=rng.random() < 0.6)) == headers


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz-:", min_size=1, max_size=20),
            st.text(alphabet=st.characters(max_codepoint=255), max_size=200),
        ),
        min_size=1,
        max_size=8,
    ),
    st.booleans(),
)
def test_any_headers_hpack_encodes_are_read_back(headers: Headers, huffman: bool) -> None:
    assert HpackDecoder().decode(encoded(hpack.Encoder(), headers, huffman=huffman)) == headers


def test_our_request_blocks_decode_with_hpack() -> None:
    headers = [
        (":method", "POST"),
        (":scheme", "https"),
        (":path", "/proto.API/Subscribe"),
        (":authority", "broker-1.example:9292"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("user-agent", "liftbridge-nats"),
        ("x-long", "v" * 300),  # a length past the 7-bit prefix
    ]
    decoder = hpack.Decoder()
    assert [(str(n), str(v)) for n, v in decoder.decode(encode_headers(headers))] == headers
    # No table is touched: the same block decodes the same way again.
    assert [(str(n), str(v)) for n, v in decoder.decode(encode_headers(headers))] == headers


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (b"\xbe", "out of range"),  # index 62, empty dynamic table
        (b"\x80", "out of range"),  # index 0
        (b"\x7f", "truncated"),  # integer continues past the end
        (b"\x40\x85ab", "truncated"),  # string longer than the block
        (b"\x40\x81\x00\x00", "Huffman"),  # padding of zeros
        (b"\x40\x84\xff\xff\xff\xff\x00", "Huffman"),  # 32 one-bits: EOS inside
        (b"\x3f\xe2\x1f", "above"),  # table size update to 4097 (max 4096)
        (b"\x88\x20", "after a header field"),  # size update after a field
        (b"\xff" + b"\xff" * 6 + b"\x01", "too large"),  # integer beyond 2**28
    ],
)
def test_broken_blocks_are_refused(block: bytes, match: str) -> None:
    with pytest.raises(HpackError, match=match):
        HpackDecoder().decode(block)
