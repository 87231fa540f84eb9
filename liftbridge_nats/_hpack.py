"""HPACK (RFC 7541), the header compression of HTTP/2: what a gRPC reader needs of it.

Sans-IO. The decoder is complete (static and dynamic tables, size updates, Huffman
strings), because the server's encoder may use any of it, and strict: what RFC 7541
calls a decoding error raises :class:`HpackError` (for HTTP/2 a connection error,
COMPRESSION_ERROR): an index of 0 or past the tables; a dynamic table size update
above the size we allow (our SETTINGS_HEADER_TABLE_SIZE) or after the block's first
field; an integer of more than 5 bytes after its prefix; an integer or a string cut
short by the end of the block; a Huffman string that contains EOS, or ends in padding
longer than 7 bits or not all ones.

Huffman strings are decoded by a state machine over 4-bit steps (two table look-ups a
byte), built at import from the code's lengths. A block's header list is bounded
(``max_header_list_size``, counted as RFC 7541 4.1 counts entries): decoding stops
as soon as the list passes the bound (:class:`HeaderListTooLarge`), so a block of
references to a large table entry costs no more than the bound allows.

The encoder only writes literals that touch no table, which every decoder accepts and
which keeps our side of the connection state-free: a request carries a handful of
short headers once per call.
"""

from __future__ import annotations

from collections import deque
from typing import Final

__all__ = ["HeaderListTooLarge", "HpackDecoder", "HpackError", "encode_headers", "huffman_decode"]


class HpackError(Exception):
    """A header block that cannot be decoded: a connection error (COMPRESSION_ERROR)."""


class HeaderListTooLarge(HpackError):
    """A header block whose fields add up to more than the decoder's
    ``max_header_list_size``: decoding stopped there (the connection cannot go on)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"header list above the {limit} bytes allowed")
        self.limit = limit


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


def _huffman_codes() -> list[tuple[int, int]]:
    """``(code, length)`` of each symbol, for the canonical code of :data:`_HUFFMAN_LENGTHS`."""
    order = sorted(range(len(_HUFFMAN_LENGTHS)), key=lambda s: (_HUFFMAN_LENGTHS[s], s))
    codes = [(0, 0)] * len(_HUFFMAN_LENGTHS)
    code = -1
    length = _HUFFMAN_LENGTHS[order[0]]
    for symbol in order:
        code = (code + 1) << (_HUFFMAN_LENGTHS[symbol] - length)
        length = _HUFFMAN_LENGTHS[symbol]
        codes[symbol] = (code, length)
    return codes


# Huffman decoding is a state machine over 4-bit steps (as nghttp2 does it). A state
# is an inner node of the code tree, 0 the root; every code is at least 5 bits long,
# so a step ends at most one symbol. _DEAD is where EOS leads: it never leaves it.
# An entry of _HUFFMAN_STEPS, indexed by ``state * 16 + nibble``, packs the next state
# (times 16, ready to index with the next nibble) above bit 9, a "symbol ends here"
# flag in bit 8 and the symbol in bits 0-7.
_EMIT: Final = 0x100


def _huffman_machine() -> tuple[list[int], frozenset[int], int]:
    children: list[list[int]] = [[-1, -1]]  # inner nodes; a leaf is stored as ~symbol
    depth = [0]
    ones = [True]  # whether the path from the root is all 1 bits
    for symbol, (code, length) in enumerate(_huffman_codes()):
        node = 0
        for i in range(length - 1, -1, -1):
            bit = (code >> i) & 1
            if i == 0:
                children[node][bit] = ~symbol
            else:
                if children[node][bit] < 0:
                    children[node][bit] = len(children)
                    depth.append(depth[node] + 1)
                    ones.append(ones[node] and bit == 1)
                    children.append([-1, -1])
                node = children[node][bit]
    dead = len(children)
    steps = [0] * ((dead + 1) * 16)
    for state in range(dead + 1):
        for nibble in range(16):
            node = state
            entry = 0
            for shift in (3, 2, 1, 0):
                if node == dead:
                    break
                child = children[node][(nibble >> shift) & 1]
                if child >= 0:
                    node = child
                elif ~child == _EOS:
                    node = dead  # EOS inside a string is an error (RFC 7541 5.2)
                else:
                    entry = _EMIT | ~child
                    node = 0
            steps[state * 16 + nibble] = (node * 16) << 9 | entry
    # A string may end inside a code only on padding: at most 7 bits, all ones (the
    # first bits of EOS).
    accepting = frozenset(s * 16 for s in range(dead) if ones[s] and depth[s] <= 7)
    return steps, accepting, dead * 16


_HUFFMAN_STEPS, _HUFFMAN_ACCEPTING, _HUFFMAN_DEAD = _huffman_machine()


def huffman_decode(data: bytes | memoryview) -> bytes:
    """Decode a Huffman-coded string (RFC 7541 5.2): two table steps per byte."""
    out = bytearray()
    append = out.append
    steps = _HUFFMAN_STEPS
    state = 0
    for byte in data:
        entry = steps[state | (byte >> 4)]
        if entry & _EMIT:
            append(entry & 0xFF)
        entry = steps[(entry >> 9) | (byte & 0xF)]
        if entry & _EMIT:
            append(entry & 0xFF)
        state = entry >> 9
    if state not in _HUFFMAN_ACCEPTING:
        if state == _HUFFMAN_DEAD:
            raise HpackError("Huffman string contains EOS")
        raise HpackError("invalid Huffman padding (more than 7 bits, or not all ones)")
    return bytes(out)


# An integer takes at most this many bytes after its prefix (as many as the hpack
# package allows): values up to 2**35, far above any index, string length or table
# size a block can hold.
_INTEGER_BYTES: Final = 5


def _integer(data: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """Decode an integer with a ``prefix``-bit prefix at ``data[pos]``; (value, next pos)."""
    mask = (1 << prefix) - 1
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    end = len(data)
    while shift < 7 * _INTEGER_BYTES:
        if pos >= end:
            raise HpackError("truncated integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise HpackError("integer too large")


class HpackDecoder:
    """Decodes header blocks of one connection, in the order they arrive.

    ``max_table_size`` is the most the dynamic table may hold (what our
    SETTINGS_HEADER_TABLE_SIZE allows); ``max_header_list_size`` bounds one decoded
    block, counted as RFC 7541 4.1 counts an entry (name and value octets plus 32 per
    field): decoding stops with :class:`HeaderListTooLarge` as soon as a block passes
    it (a string whose length alone passes it is not decoded at all).
    """

    def __init__(self, max_table_size: int = 4096, max_header_list_size: int = 65536) -> None:
        # The most our SETTINGS allow; the encoder may choose less (a size update).
        self._max_allowed = max_table_size
        self._max_size = max_table_size
        self._max_list = max_header_list_size
        self._size = 0
        self._table: deque[tuple[str, str]] = deque()  # newest first

    @property
    def table_size(self) -> int:
        """The dynamic table's size now (RFC 7541 4.1)."""
        return self._size

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
        """Decode one complete header block into ``(name, value)`` pairs.

        Raises :class:`HpackError` for a block that breaks RFC 7541 and
        :class:`HeaderListTooLarge` for one above ``max_header_list_size``.
        """
        headers: list[tuple[str, str]] = []
        pos = 0
        end = len(block)
        room = self._max_list  # what the list may still take
        seen_field = False
        while pos < end:
            byte = block[pos]
            if byte & 0x80:  # indexed field
                index, pos = _integer(block, pos, 7)
                field = self._entry(index)
                room -= len(field[0]) + len(field[1]) + 32
                if room < 0:
                    raise HeaderListTooLarge(self._max_list)
                headers.append(field)
                seen_field = True
            elif byte & 0x40:  # literal, added to the dynamic table
                name, value, pos, room = self._literal(block, pos, 6, room)
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
                name, value, pos, room = self._literal(block, pos, 4, room)
                headers.append((name, value))
                seen_field = True
        return headers

    def _literal(self, block: bytes, pos: int, prefix: int, room: int) -> tuple[str, str, int, int]:
        """A literal field: its name (indexed, or a string) and its value; the room
        left in the header list once it is counted."""
        index, pos = _integer(block, pos, prefix)
        room -= 32
        if index:
            name = self._entry(index)[0]
            room -= len(name)
        else:
            name, pos, room = self._string(block, pos, room)
        value, pos, room = self._string(block, pos, room)
        return name, value, pos, room

    def _string(self, data: bytes, pos: int, room: int) -> tuple[str, int, int]:
        """A string literal at ``pos``: (text, next pos, room left in the list)."""
        if pos >= len(data):
            raise HpackError("truncated string")
        huffman = data[pos] & 0x80
        length, pos = _integer(data, pos, 7)
        end = pos + length
        if end > len(data):
            raise HpackError("truncated string")
        if huffman:
            # A code is at most 30 bits: the string is at least this long once decoded.
            if length * 8 // 30 > room:
                raise HeaderListTooLarge(self._max_list)
            raw = huffman_decode(data[pos:end])
        else:
            if length > room:
                raise HeaderListTooLarge(self._max_list)
            raw = data[pos:end]
        room -= len(raw)
        if room < 0:
            raise HeaderListTooLarge(self._max_list)
        # Header values are ASCII in gRPC; latin-1 maps any byte without failing.
        return raw.decode("latin-1"), end, room


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
