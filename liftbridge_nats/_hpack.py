"""HPACK (RFC 7541), the header compression of HTTP/2: what a gRPC reader needs of it.

Sans-IO. The decoder is complete (static and dynamic tables, size updates, Huffman
strings), because the server's encoder may use any of it. The encoder only writes
literals that touch no table, which every decoder accepts and which keeps our side of
the connection state-free: a request carries a handful of short headers once per call.
"""

from __future__ import annotations

from collections import deque
from typing import Final

__all__ = ["HpackDecoder", "HpackError", "encode_headers"]


class HpackError(Exception):
    """A header block that cannot be decoded: a connection error (COMPRESSION_ERROR)."""


# RFC 7541 Appendix A: the static table, index 1 first.
_STATIC: Final[tuple[tuple[str, str], ...]] = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)

# RFC 7541 Appendix B gives the Huffman code of each symbol (0-255, and 256 = EOS).
# The code is canonical: listing the code lengths is enough to rebuild every code
# (symbols sorted by length, then by value, take consecutive codes).
_HUFFMAN_LENGTHS: Final[tuple[int, ...]] = (
    *(13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28),
    *(28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28),
    *(6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6),
    *(5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10),
    *(13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7),
    *(7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6),
    *(15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5),
    *(6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28),
    *(20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23),
    *(24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24),
    *(22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23),
    *(21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23),
    *(26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25),
    *(19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27),
    *(20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23),
    *(26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26),
    30,
)
_EOS: Final = 256


def _huffman_codes() -> dict[tuple[int, int], int]:
    """``(length, code) -> symbol`` for the canonical code of :data:`_HUFFMAN_LENGTHS`."""
    order = sorted(range(len(_HUFFMAN_LENGTHS)), key=lambda s: (_HUFFMAN_LENGTHS[s], s))
    table: dict[tuple[int, int], int] = {}
    code = -1
    length = _HUFFMAN_LENGTHS[order[0]]
    for symbol in order:
        code = (code + 1) << (_HUFFMAN_LENGTHS[symbol] - length)
        length = _HUFFMAN_LENGTHS[symbol]
        table[(length, code)] = symbol
    return table


_HUFFMAN: Final = _huffman_codes()
_SHORTEST: Final = min(_HUFFMAN_LENGTHS)


def huffman_decode(data: bytes | memoryview) -> bytes:
    """Decode a Huffman-coded string (headers are short: a bit at a time is fine)."""
    out = bytearray()
    code = 0
    length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            if length < _SHORTEST:
                continue
            symbol = _HUFFMAN.get((length, code))
            if symbol is None:
                if length >= 30:
                    raise HpackError("invalid Huffman code")
                continue
            if symbol == _EOS:
                raise HpackError("Huffman string contains EOS")
            out.append(symbol)
            code = 0
            length = 0
    # What is left must be padding: fewer than 8 bits, all ones (a prefix of EOS).
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("invalid Huffman padding")
    return bytes(out)


def _integer(data: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """Decode an integer with a ``prefix``-bit prefix at ``data[pos]``; (value, next pos)."""
    mask = (1 << prefix) - 1
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data):
            raise HpackError("truncated integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos
        if shift > 28:
            raise HpackError("integer too large")


def _string(data: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(data):
        raise HpackError("truncated string")
    huffman = data[pos] & 0x80
    length, pos = _integer(data, pos, 7)
    end = pos + length
    if end > len(data):
        raise HpackError("truncated string")
    raw = data[pos:end]
    # Header values are ASCII in gRPC; latin-1 maps any byte without failing.
    return (huffman_decode(raw) if huffman else raw).decode("latin-1"), end


class HpackDecoder:
    """Decodes header blocks of one connection, in the order they arrive."""

    def __init__(self, max_table_size: int = 4096) -> None:
        # The most our SETTINGS allow; the encoder may choose less (a size update).
        self._max_allowed = max_table_size
        self._max_size = max_table_size
        self._size = 0
        self._table: deque[tuple[str, str]] = deque()  # newest first

    def _entry(self, index: int) -> tuple[str, str]:
        if 0 < index <= len(_STATIC):
            return _STATIC[index - 1]
        dynamic = index - len(_STATIC) - 1
        if index <= 0 or dynamic >= len(self._table):
            raise HpackError(f"header index {index} out of range")
        return self._table[dynamic]

    def _add(self, name: str, value: str) -> None:
        size = len(name) + len(value) + 32
        self._evict(self._max_size - size)
        if size <= self._max_size:
            self._table.appendleft((name, value))
            self._size += size

    def _evict(self, room: int) -> None:
        while self._table and self._size > room:
            old_name, old_value = self._table.pop()
            self._size -= len(old_name) + len(old_value) + 32
        if not self._table:
            self._size = 0

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        """Decode one complete header block into ``(name, value)`` pairs."""
        headers: list[tuple[str, str]] = []
        pos = 0
        end = len(block)
        seen_field = False
        while pos < end:
            byte = block[pos]
            if byte & 0x80:  # indexed field
                index, pos = _integer(block, pos, 7)
                headers.append(self._entry(index))
                seen_field = True
            elif byte & 0x40:  # literal, added to the dynamic table
                name, value, pos = self._literal(block, pos, 6)
                headers.append((name, value))
                self._add(name, value)
                seen_field = True
            elif byte & 0x20:  # dynamic table size update
                if seen_field:
                    raise HpackError("table size update after a header field")
                size, pos = _integer(block, pos, 5)
                if size > self._max_allowed:
                    raise HpackError(f"table size {size} above the {self._max_allowed} allowed")
                self._max_size = size
                self._evict(size)
            else:  # literal, not indexed (0000) or never indexed (0001)
                name, value, pos = self._literal(block, pos, 4)
                headers.append((name, value))
                seen_field = True
        return headers

    def _literal(self, block: bytes, pos: int, prefix: int) -> tuple[str, str, int]:
        """A literal field: its name (indexed, or a string) and its value."""
        index, pos = _integer(block, pos, prefix)
        if index:
            name = self._entry(index)[0]
        else:
            name, pos = _string(block, pos)
        value, pos = _string(block, pos)
        return name, value, pos


def _encode_integer(value: int, prefix: int, first: int) -> bytes:
    mask = (1 << prefix) - 1
    if value < mask:
        return bytes([first | value])
    out = bytearray([first | mask])
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_string(text: str) -> bytes:
    raw = text.encode("latin-1")
    return _encode_integer(len(raw), 7, 0) + raw


_STATIC_NAMES: Final = {name: i for i, (name, _) in reversed(list(enumerate(_STATIC, 1)))}


def encode_headers(headers: list[tuple[str, str]]) -> bytes:
    """A header block of literals "without indexing" (names from the static table when
    there, no Huffman): decodable by anyone and changing no table."""
    out = bytearray()
    for name, value in headers:
        index = _STATIC_NAMES.get(name, 0)
        out += _encode_integer(index, 4, 0x00)
        if not index:
            out += _encode_string(name)
        out += _encode_string(value)
    return bytes(out)
