"""HPACK decoding, checked against an independent implementation (the hpack package)
and the RFC 7541 example; broken header blocks are refused, never half-read."""

from __future__ import annotations

import random
import time

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge_nats._hpack import (
    HeaderListTooLarge,
    HpackDecoder,
    HpackError,
    _encode_integer,
    encode_headers,
    huffman_decode,
)

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
        pytest.param(b"\xbe", "out of range", id="index 62, empty dynamic table"),
        pytest.param(b"\x80", "out of range", id="index 0"),
        pytest.param(b"\x40\x01a\x00\xbf", "out of range", id="index past the dynamic table"),
        pytest.param(b"\x7f\x3f\x01a", "out of range", id="literal name index out of range"),
        pytest.param(b"\x0f\x30\x00", "out of range", id="literal name index 78"),
        pytest.param(b"\x7f", "truncated", id="integer continues past the end"),
        pytest.param(b"\xff\x80", "truncated", id="integer continuation past the end"),
        pytest.param(b"\x40", "truncated", id="literal without its name"),
        pytest.param(b"\x40\x01a", "truncated", id="literal without its value"),
        pytest.param(b"\x0f\x10", "truncated", id="indexed name without its value"),
        pytest.param(b"\x40\x85ab", "truncated", id="string longer than the block"),
        pytest.param(b"\x40\x7f\x80", "truncated", id="string length cut short"),
        pytest.param(b"\x40\x81\x00\x00", "padding", id="padding of zeros"),
        pytest.param(b"\x40\x81\x02\x00", "padding", id="padding not all ones"),
        pytest.param(b"\x40\x82\x1f\xff\x00", "padding", id="padding of 8 bits"),
        pytest.param(b"\x40\x82\xff\xff\x00", "padding", id="16 one-bits"),
        pytest.param(b"\x40\x84\xff\xff\xff\xff\x00", "EOS", id="32 one-bits: EOS inside"),
        pytest.param(b"\x40\x84\xff\xff\xff\xfc\x00", "EOS", id="EOS then padding"),
        pytest.param(b"\x40\x85\x1f\xff\xff\xff\xff\x00", "EOS", id="EOS after a symbol"),
        pytest.param(b"\x3f\xe2\x1f", "above", id="table size update to 4097"),
        pytest.param(b"\x88\x20", "after a header field", id="size update after a field"),
        pytest.param(b"\x20\x88\x3f\x00", "after a header field", id="second update late"),
        pytest.param(b"\xff" + b"\xff" * 5 + b"\x01", "too large", id="integer of 7 bytes"),
        pytest.param(b"\x3f" + b"\x80" * 5 + b"\x00", "too large", id="padded integer"),
    ],
)
def test_broken_blocks_are_refused(block: bytes, match: str) -> None:
    with pytest.raises(HpackError, match=match):
        HpackDecoder().decode(block)


def test_updates_at_the_start_and_integers_of_six_bytes_are_read() -> None:
    decoder = HpackDecoder()
    # Two size updates (0, then 4096 in a 6-byte integer), then a field.
    assert decoder.decode(b"\x20\x3f\xe1\x9f\x80\x80\x00\x88") == [(":status", "200")]
    assert decoder.decode(b"\x20") == []  # an update alone is a block too


def huffman_encode(data: bytes) -> bytes:
    return bytes(
        hpack.huffman.HuffmanEncoder(
            hpack.huffman_constants.REQUEST_CODES, hpack.huffman_constants.REQUEST_CODES_LENGTH
        ).encode(data)
    )


def literal(name: bytes, value: bytes, *, huffman: bool = False, index: bool = False) -> bytes:
    def string(raw: bytes) -> bytes:
        coded = huffman_encode(raw) if huffman else raw
        return _encode_integer(len(coded), 7, 0x80 if huffman else 0) + coded

    return (b"\x40" if index else b"\x00") + string(name) + string(value)


@pytest.mark.parametrize(
    ("block", "limit"),
    [
        pytest.param(b"\x88" * 3, 3 * 42 - 1, id="indexed fields"),
        pytest.param(literal(b"n", b"v" * 100), 132, id="a plain value"),
        pytest.param(literal(b"n" * 100, b""), 131, id="a plain name"),
        pytest.param(literal(b"n", b"v" * 100, huffman=True), 132, id="a Huffman value"),
        pytest.param(b"\x0f\x10" + b"\x7f\x81\x7f" + b"v" * 16_384, 1000, id="long plain value"),
        pytest.param(
            literal(b"n", bytes(range(128, 256)) * 100, huffman=True),
            1000,
            id="long Huffman value",
        ),
        pytest.param(
            b"\x40\x01x" + b"\x7f\xa1\x1e" + b"y" * 4000 + b"\xbe" * 10,
            4 * 4033,
            id="references to a big entry",
        ),
    ],
)
def test_the_header_list_is_bounded_while_decoding(block: bytes, limit: int) -> None:
    with pytest.raises(HeaderListTooLarge):
        HpackDecoder(max_header_list_size=limit).decode(block)
    # One byte more room (or much more, for the long ones) and it decodes.
    if len(block) < 1000:
        HpackDecoder(max_header_list_size=limit + 1).decode(block)


def test_a_bomb_costs_no_more_than_the_limit() -> None:
    # 4,000-byte entry, then a million references to it: 4 GB of header list.
    block = b"\x40\x01x" + b"\x7f\xa1\x1e" + b"y" * 4000 + b"\xbe" * 1_000_000
    started = time.process_time()
    with pytest.raises(HeaderListTooLarge):
        HpackDecoder().decode(block)
    assert time.process_time() - started < 0.05


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_huffman_decoding_agrees_with_hpack_on_any_bytes(data: bytes) -> None:
    try:
        expected: bytes | None = hpack.huffman_table.decode_huffman(data)
    except hpack.HPACKDecodingError:
        expected = None
    try:
        got: bytes | None = huffman_decode(data)
    except HpackError:
        got = None
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_huffman_round_trips_any_bytes(data: bytes) -> None:
    assert huffman_decode(huffman_encode(data)) == data


Field = tuple[bytes, bytes]
_fields = st.lists(
    st.tuples(
        st.one_of(
            st.sampled_from([b":status", b"content-type", b"grpc-status", b"grpc-message"]),
            st.binary(min_size=1, max_size=12),
        ),
        st.binary(max_size=120),
    ),
    max_size=10,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(_fields, st.booleans(), st.sampled_from([None, 0, 64, 256, 1024, 4096])),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([200, 1000, 4096, 65_536]),
)
def test_hpack_encoder_is_the_oracle(
    blocks: list[tuple[list[Field], bool, int | None]], limit: int
) -> None:
    """Blocks of one connection (random fields, Huffman or not, table size changes)
    decode to what hpack's encoder encoded, and a block above the list limit fails
    in both decoders."""
    encoder = hpack.Encoder()
    ours = HpackDecoder(max_header_list_size=limit)
    theirs = hpack.Decoder(max_header_list_size=limit)
    for fields, huffman, table_size in blocks:
        if table_size is not None:
            encoder.header_table_size = table_size
        data = bytes(encoder.encode(fields, huffman=huffman))
        try:
            expected = [(bytes(n), bytes(v)) for n, v in theirs.decode(data, raw=True)]
        except hpack.OversizedHeaderListError:
            with pytest.raises(HeaderListTooLarge):
                ours.decode(data)
            return  # the connection would end here
        got = ours.decode(data)
        assert [(n.encode("latin-1"), v.encode("latin-1")) for n, v in got] == expected
        assert expected == [(n, v) for n, v in fields]
        assert ours.table_size == theirs.header_table._current_size


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=80), st.randoms(use_true_random=False))
def test_any_block_is_accepted_or_refused_as_hpack_does(tail: bytes, rng: random.Random) -> None:
    """Broken blocks: a valid start (which fills the table), then anything."""
    encoder = hpack.Encoder()
    start = bytes(encoder.encode([(b"x-a", b"1" * rng.randrange(50))], huffman=rng.random() < 0.5))
    data = start + tail if rng.random() < 0.7 else tail
    try:
        expected: list[tuple[bytes, bytes]] | None = [
            (bytes(n), bytes(v)) for n, v in hpack.Decoder().decode(data, raw=True)
        ]
    except hpack.HPACKError:
        expected = None
    try:
        got: list[tuple[bytes, bytes]] | None = [
            (n.encode("latin-1"), v.encode("latin-1")) for n, v in HpackDecoder().decode(data)
        ]
    except HpackError:
        got = None
    assert got == expected
