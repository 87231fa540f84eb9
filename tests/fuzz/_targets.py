"""What is fuzzed, and how inputs are made.

The contract under test: the three decoders that see bytes from the network
(``envelope.decode``, ``wire.decode_ack``, ``wire.decode_publish``) either return a
value or raise :class:`~liftbridge_nats.EnvelopeError`. Any other exception is a
finding. Inputs come from three sources that complement each other: seeds (valid
envelopes of every kind the server or a publisher sends), mutations of those seeds
(byte flips, truncations, splices, header field rewrites, CRC fix-ups so that mutated
payloads reach the protobuf parser), and plain random bytes.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import crc32c

from liftbridge_nats import Ack, AckPolicy, envelope, wire
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.envelope import MAGIC, EnvelopeError, MsgType

Decoder = Callable[[bytes], object]

DECODERS: dict[str, Decoder] = {
    "envelope.decode": envelope.decode,
    "wire.decode_ack": wire.decode_ack,
    "wire.decode_publish": wire.decode_publish,
}


@dataclass
class Finding:
    """An input that made a decoder raise something other than EnvelopeError."""

    decoder: str
    data: bytes
    error: str


@dataclass
class Tally:
    """Counts of one fuzzing run."""

    inputs: int = 0
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts to this one."""
        self.inputs += other.inputs
        self.calls += other.calls
        self.outcomes.update(other.outcomes)
        self.findings.extend(other.findings)


def check(data: bytes, tally: Tally) -> None:
    """Feed ``data`` to every decoder; record anything but a value or EnvelopeError."""
    tally.inputs += 1
    for name, decode in DECODERS.items():
        tally.calls += 1
        try:
            result = decode(data)
            _touch(result)
        except EnvelopeError:
            tally.outcomes[f"{name}: EnvelopeError"] += 1
        except Exception as exc:  # the finding itself: anything else escaped
            tally.outcomes[f"{name}: {type(exc).__name__}"] += 1
            if len(tally.findings) < 100:
                tally.findings.append(Finding(name, data, f"{type(exc).__name__}: {exc}"))
        else:
            tally.outcomes[f"{name}: decoded"] += 1


def _touch(result: object) -> None:
    # Read every field, so an error hidden behind a lazy view or property would surface.
    if isinstance(result, envelope.Envelope):
        bytes(result.payload)
    elif isinstance(result, wire.PublishedMessage):
        message = result.message
        dict(message.headers)
        _ = (message.value, message.key, message.time, result.ack_inbox, result.correlation_id)
    else:
        assert isinstance(result, Ack), f"decoded to a {type(result).__name__}"
        _ = (result.commit_time, result.reception_time)


# ------------------------------------------------------------------ seeds


def seeds() -> list[bytes]:
    """Valid envelopes of every shape the decoders are meant to accept."""
    out: list[bytes] = []
    for crc in (False, True):
        out.append(wire.encode_publish(b"", crc=crc))
        out.append(
            wire.encode_publish(
                b"value" * 20,
                key=b"key-1",
                headers={"h1": b"x", "trace": b"\x00\xff"},
                ack_inbox="_INBOX.abcdef.1",
                correlation_id="cid-1",
                ack_policy=AckPolicy.ALL,
                expected_offset=7,
                crc=crc,
            )
        )
        ack = api_pb2.Ack(
            stream="orders",
            partitionSubject="orders.1",
            msgSubject="orders.1",
            offset=12345,
            ackInbox="_INBOX.abcdef.1",
            correlationId="cid-1",
            ackPolicy=api_pb2.ALL,
            receptionTimestamp=1_700_000_000_000_000_000,
            commitTimestamp=1_700_000_000_000_000_001,
            ackError=api_pb2.Ack.INCORRECT_OFFSET,
        )
        out.append(envelope.encode(MsgType.ACK, ack.SerializeToString(), crc=crc))
        out.append(envelope.encode(MsgType.ACK, b"", crc=crc))
        for t in MsgType:
            out.append(envelope.encode(t, b"\x08\x01\x12\x03abc", crc=crc))
    return out


# ------------------------------------------------------------------ mutations


def _fix_crc(data: bytearray) -> None:
    # Mutated payloads behind a CRC header would all stop at the CRC check; rewriting
    # the checksum lets them reach the protobuf parser.
    if len(data) >= 12 and data[:4] == MAGIC and data[5] == 12 and data[6] & 1:
        struct.pack_into(">I", data, 8, crc32c.crc32c(bytes(data[12:])))


_INTERESTING = (0, 1, 7, 8, 9, 11, 12, 13, 14, 15, 16, 0x7F, 0x80, 0xFF)


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """Apply one to four random mutations to ``data``."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(10)
        n = len(buf)
        if op == 0 and n:  # flip bits
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # set a byte
            buf[rng.randrange(n)] = rng.randrange(256)
        elif op == 2 and n:  # truncate
            del buf[rng.randrange(n) :]
        elif op == 3:  # insert random bytes
            at = rng.randrange(n + 1)
            buf[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op == 4 and n > 1:  # delete a range
            at = rng.randrange(n)
            del buf[at : at + rng.randint(1, 8)]
        elif op == 5 and n >= 8:  # rewrite a header field (version, len, flags, type)
            buf[rng.randrange(4, 8)] = rng.choice(_INTERESTING)
        elif op == 6:  # splice with another seed
            other = rng.choice(pool)
            buf = buf[: rng.randrange(n + 1)] + bytearray(other[rng.randrange(len(other) + 1) :])
        elif op == 7 and n > 8:  # overwrite payload with a varint-ish run
            at = rng.randrange(8, n)
            buf[at : at + 10] = bytes(rng.choice((0x80, 0xFF)) for _ in range(rng.randint(1, 10)))
        elif op == 8 and n > 8:  # duplicate a payload range (repeated fields)
            at = rng.randrange(8, n)
            buf[at:at] = buf[at : at + rng.randint(1, 32)]
        else:  # length-delimited field with an absurd length
            tag = rng.choice((0x0A, 0x12, 0x1A, 0x22, 0x4A, 0x52, 0x5A))
            buf += bytes((tag,)) + wire.varint(rng.choice((0, 1, 127, 128, 2**31, 2**63)))
    _fix_crc(buf)
    return bytes(buf)


def random_input(rng: random.Random) -> bytes:
    """Plain random bytes, half of them behind a valid magic number."""
    body = rng.randbytes(rng.choice((0, 1, 4, 7, 8, 12, 20, 64, 300)))
    if rng.random() < 0.5:
        header = MAGIC + bytes((0, rng.choice((8, 12)), rng.randrange(2), rng.randrange(16)))
        buf = bytearray(header + body)
        _fix_crc(buf)
        return bytes(buf)
    return body


def run_mutations(count: int, seed: int) -> Tally:
    """Check ``count`` inputs: 80 % seed mutations, 20 % random bytes."""
    rng = random.Random(seed)
    pool = seeds()
    tally = Tally()
    for data in pool:
        check(data, tally)
    # Mutants that decoded are kept as new seeds (a cheap form of coverage feedback).
    corpus = list(pool)
    while tally.inputs < count:
        data = random_input(rng) if rng.random() < 0.2 else mutate(rng, rng.choice(corpus), pool)
        before = (
            tally.outcomes["wire.decode_ack: decoded"]
            + tally.outcomes["wire.decode_publish: decoded"]
        )
        check(data, tally)
        after = (
            tally.outcomes["wire.decode_ack: decoded"]
            + tally.outcomes["wire.decode_publish: decoded"]
        )
        if after > before and len(corpus) < 5000:
            corpus.append(data)
    return tally
