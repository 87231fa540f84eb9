"""Which partition of a stream a message goes to, and that partition's NATS subject.

Partition 0 of a stream listens on the stream's subject ``foo``, partition N on
``foo.N``. The partitioners here make the same choices as the official Go client, so
Python and Go publishers put a key on the same partition:

* :class:`KeyPartitioner`: CRC-32 (IEEE, :func:`zlib.crc32`) of the key, an empty key
  when there is none, modulo the partition count;
* :class:`RoundRobinPartitioner`: a counter per stream, starting at partition 0;
* :class:`RandomPartitioner`: uniformly random;
* any callable ``(key, value, partition_count) -> int``.

As in the Go client, a message with neither a partition nor a partitioner goes to
partition 0.
"""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Callable, Iterator
from typing import TypeAlias

from ._checks import check_partition
from ._errors import InvalidArgumentError

__all__ = [
    "KeyPartitioner",
    "PartitionFunction",
    "Partitioner",
    "PartitionerLike",
    "RandomPartitioner",
    "RoundRobinPartitioner",
    "choose_partition",
    "partition_subject",
]

PartitionFunction: TypeAlias = Callable[[bytes | None, bytes, int], int]
"""A plain callable partitioner: ``(key, value, partition_count) -> partition``."""


def partition_subject(subject: str, partition: int) -> str:
    """The NATS subject of ``partition`` of a stream recording ``subject``."""
    check_partition(partition)
    return subject if partition == 0 else f"{subject}.{partition}"


class Partitioner:
    """Base of the stateful partitioners; subclasses implement :meth:`partition`.

    Instances are also plain callables ``(key, value, count)``, which use the
    stream name ``""`` for any per-stream state.
    """

    __slots__ = ()

    def partition(self, stream: str, key: bytes | None, value: bytes, count: int) -> int:
        """Return the partition (``0 <= p < count``) for a message of ``stream``."""
        raise NotImplementedError

    def __call__(self, key: bytes | None, value: bytes, count: int) -> int:
        return self.partition("", key, value, count)


class KeyPartitioner(Partitioner):
    """CRC-32 (IEEE) of the key modulo the partition count, like the Go client.

    Messages with the same key always go to the same partition (while the partition
    count stays the same); messages without a key all go where the empty key goes.
    """

    __slots__ = ()

    def partition(self, stream: str, key: bytes | None, value: bytes, count: int) -> int:
        """Hash the key; the stream name plays no part."""
        if count <= 0:
            return 0
        return zlib.crc32(key or b"") % count


class RoundRobinPartitioner(Partitioner):
    """Cycles through the partitions, one counter per stream, starting at 0."""

    __slots__ = ("_counters",)

    def __init__(self) -> None:
        self._counters: dict[str, Iterator[int]] = {}

    def partition(self, stream: str, key: bytes | None, value: bytes, count: int) -> int:
        """The stream's next counter value modulo ``count``."""
        if count <= 0:
            return 0
        counter = self._counters.get(stream)
        if counter is None:
            counter = self._counters[stream] = itertools.count()
        return next(counter) % count


class RandomPartitioner(Partitioner):
    """A uniformly random partition; pass ``rng`` for a reproducible sequence."""

    __slots__ = ("_rng",)

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def partition(self, stream: str, key: bytes | None, value: bytes, count: int) -> int:
        """Any partition, each with the same probability."""
        if count <= 0:
            return 0
        return self._rng.randrange(count)


PartitionerLike: TypeAlias = Partitioner | PartitionFunction
"""What ``partitioner=`` accepts: a :class:`Partitioner` or a plain callable."""


def choose_partition(
    partitioner: PartitionerLike, stream: str, key: bytes | None, value: bytes, count: int
) -> int:
    """Ask ``partitioner`` for a partition and check that it exists."""
    if isinstance(partitioner, Partitioner):
        chosen = partitioner.partition(stream, key, value, count)
    else:
        chosen = partitioner(key, value, count)
    if not isinstance(chosen, int) or not 0 <= chosen < max(count, 1):
        raise InvalidArgumentError(
            f"the partitioner chose partition {chosen!r} but stream {stream!r} has "
            f"{count} partition(s); it must return an int in [0, {count})"
        )
    return chosen
