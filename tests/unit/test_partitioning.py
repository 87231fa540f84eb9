"""Partition choice and partition subjects, checked against the official Go client."""

from __future__ import annotations

import random
import zlib

import pytest

from liftbridge_nats import (
    InvalidArgumentError,
    KeyPartitioner,
    RandomPartitioner,
    RoundRobinPartitioner,
    partition_subject,
)
from liftbridge_nats._partitioning import choose_partition

# Produced by Go's hash/crc32.ChecksumIEEE, the hasher go-liftbridge v2.3.0's key
# partitioner uses (message.go: keyPartitioner, hasher = crc32.ChecksumIEEE), with the
# partition it picks for 3, 5 and 7 partitions: (key, checksum, p3, p5, p7).
GO_VECTORS = [
    (b"", 0, 0, 0, 0),
    (b"a", 3904355907, 0, 2, 4),
    (b"key", 2324736937, 1, 2, 5),
    (b"user-1", 2116437524, 2, 4, 5),
    (b"user-2", 3878623150, 1, 0, 3),
    (b"order:42", 1319023403, 2, 3, 5),
    (b"123456789", 3421780262, 2, 2, 5),
    (b"liftbridge", 243812431, 1, 1, 2),
    (b"\x00\xff", 1826356594, 1, 4, 6),
]


@pytest.mark.parametrize(("key", "checksum", "p3", "p5", "p7"), GO_VECTORS)
def test_key_partitioner_matches_go_client(
    key: bytes, checksum: int, p3: int, p5: int, p7: int
) -> None:
    assert zlib.crc32(key) == checksum
    part = KeyPartitioner()
    assert [part.partition("s", key, b"v", n) for n in (3, 5, 7)] == [p3, p5, p7]
    assert part(key, b"ignored", 3) == p3


def test_key_partitioner_no_key_is_empty_key() -> None:
    part = KeyPartitioner()
    assert part.partition("s", None, b"v", 3) == part.partition("s", b"", b"v", 3) == 0
    assert part.partition("s", b"k", b"v", 0) == 0


def test_round_robin_counts_per_stream_from_zero() -> None:
    part = RoundRobinPartitioner()
    assert [part.partition("a", None, b"", 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    # Another stream has its own counter, as in the Go client.
    assert [part.partition("b", None, b"", 2) for _ in range(3)] == [0, 1, 0]
    assert part.partition("a", None, b"", 3) == 1


def test_random_partitioner_is_uniform_and_seedable() -> None:
    seq = [RandomPartitioner(random.Random(7)).partition("s", None, b"", 4) for _ in range(3)]
    again = [RandomPartitioner(random.Random(7)).partition("s", None, b"", 4) for _ in range(3)]
    assert seq == again
    part = RandomPartitioner(random.Random(1))
    counts = [0] * 4
    for _ in range(4000):
        counts[part.partition("s", None, b"", 4)] += 1
    assert all(800 < c < 1200 for c in counts), counts


def test_choose_partition_accepts_callables_and_checks_range() -> None:
    assert choose_partition(lambda k, v, n: n - 1, "s", None, b"", 4) == 3
    assert choose_partition(KeyPartitioner(), "s", b"key", b"", 3) == 1
    with pytest.raises(InvalidArgumentError, match="partition 4"):
        choose_partition(lambda k, v, n: 4, "s", None, b"", 4)
    with pytest.raises(InvalidArgumentError):
        choose_partition(lambda k, v, n: -1, "s", None, b"", 4)
    with pytest.raises(InvalidArgumentError):
        choose_partition(lambda k, v, n: "0", "s", None, b"", 4)  # type: ignore[arg-type,return-value]


def test_partition_subject() -> None:
    assert partition_subject("orders", 0) == "orders"
    assert partition_subject("orders", 2) == "orders.2"
    with pytest.raises(InvalidArgumentError):
        partition_subject("orders", -1)
