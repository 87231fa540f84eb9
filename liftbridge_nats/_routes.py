"""Stream routes: which NATS subject and partition a message for a stream goes to, and
what to do when that partition does not answer.

A layer above :mod:`._router` (which owns the gRPC channels and the metadata cache),
for publishing: ``stream`` + ``partition`` or ``partitioner`` -> (partition subject,
partition number), from the stream's metadata as a :class:`~liftbridge_nats.Client`
reports it. The :class:`~liftbridge_nats.Publisher` and the Client's own
``publish_to_stream`` choose partitions here, so both put a key on the same partition
(and both as the Go client does: a given partition, else the partitioner's choice, else
partition 0).

Recovery: Liftbridge drops NATS messages to a paused partition (no ack, nothing
stored) and resumes it only on a gRPC request; a readonly partition stores and acks
nothing. :meth:`StreamRoutes.resume_if_paused` and :meth:`StreamRoutes.explain_timeout`
find out which through the client and resume a paused partition;
:meth:`StreamRoutes.nobody_listened` does it in the background for a subject that a
stream publish went to (the publisher's retry policy calls it on a no-responders report).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

from ._errors import InvalidArgumentError, LiftbridgeError, ReadonlyPartitionError
from ._log import get_logger
from ._partitioning import PartitionerLike, choose_partition, partition_subject

if TYPE_CHECKING:
    from ._errors import AckTimeoutError

__all__ = ["StreamRoutes"]

_log = get_logger("publisher")

# Subjects remembered per publisher (publish_to_stream_async's partition subjects).
_SUBJECT_CACHE_LIMIT = 4096


class StreamRoutes:
    """Routes messages for streams to partition subjects through ``client`` (a
    :class:`~liftbridge_nats.Client`, or None: then every call says that one is needed).

    ``remember``: keep each stream's subject and partition count until a publish to it
    goes unanswered or names a partition beyond the count (a publisher, which must not
    ask the server per message); otherwise every lookup reads the client's metadata
    cache, which ages by itself. ``resume_paused``: resume paused partitions found on
    the way (:meth:`explain_timeout`, :meth:`nobody_listened`).
    """

    __slots__ = ("_client", "_remember", "_resume_paused", "_resumes", "_routes", "_subjects")

    def __init__(self, client: Any, *, remember: bool = True, resume_paused: bool = True) -> None:
        self._client = client
        self._remember = remember
        self._resume_paused = resume_paused
        self._routes: dict[str, tuple[str, int]] = {}
        # Partition subjects a stream publish went to: (stream, partition).
        self._subjects: dict[str, tuple[str, int]] = {}
        # Background resumes of paused partitions (nobody_listened), by partition.
        self._resumes: dict[tuple[str, int], asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ routing

    async def route(self, stream: str, *, refresh: bool = False) -> tuple[str, int]:
        """The subject ``stream`` records and its partition count (at least 1)."""
        route = None if refresh else self._routes.get(stream)
        if route is None:
            info = await self._needs_client().stream_info(stream, refresh=refresh)
            route = (info.subject, max(1, len(info.partitions)))
            if self._remember:
                self._routes[stream] = route
        return route

    def forget(self, stream: str) -> None:
        """Look the stream up again next time (a publish to it went unanswered)."""
        self._routes.pop(stream, None)

    async def partition(
        self,
        stream: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
        partitioner: PartitionerLike | None,
    ) -> int:
        """The partition a message goes to: ``partition`` as given (the server checks
        it), else the partitioner's choice, else 0. Asks for the partition count only
        for a partitioner."""
        if partition is not None:
            return partition
        if partitioner is None:
            return 0
        _, count = await self.route(stream)
        return choose_partition(partitioner, stream, key, value, count)

    async def target(
        self,
        stream: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
        partitioner: PartitionerLike | None,
    ) -> tuple[str, int]:
        """The NATS subject and number of the partition of ``stream`` a message goes to
        (``key`` and ``value`` serialized: a partitioner sees bytes). A ``partition``
        beyond the cached count is looked up again before it is refused."""
        subject, count = await self.route(stream)
        if partition is None:
            partition = (
                choose_partition(partitioner, stream, key, value, count) if partitioner else 0
            )
        elif not isinstance(partition, int) or partition < 0:
            raise InvalidArgumentError(f"partition must be an int >= 0, got {partition!r}")
        elif partition >= count:
            subject, count = await self.route(stream, refresh=True)
            if partition >= count:
                raise InvalidArgumentError(
                    f"stream {stream!r} has {count} partition(s); partition {partition} "
                    "does not exist"
                )
        return partition_subject(subject, partition), partition

    def note(self, subject: str, stream: str, partition: int) -> None:
        """Remember that ``subject`` is ``partition`` of ``stream`` (for
        :meth:`nobody_listened`)."""
        subjects = self._subjects
        if subject not in subjects:
            if len(subjects) >= _SUBJECT_CACHE_LIMIT:
                subjects.clear()
            subjects[subject] = (stream, partition)

    # ------------------------------------------------------------------ recovery

    def nobody_listened(self, subject: str, within: float) -> None:
        """NATS found nobody listening on ``subject``: if it is a partition a stream
        publish went to, resume it in the background (when it reports paused, giving
        the resume ``within`` seconds), and look the stream up again once that is done."""
        if not self._subjects or not self._resume_paused:
            return
        where = self._subjects.get(subject)
        if where is not None and where not in self._resumes:
            self._resumes[where] = asyncio.get_running_loop().create_task(
                self._resume_later(*where, within)
            )

    async def _resume_later(self, stream: str, partition: int, within: float) -> None:
        try:
            await self.resume_if_paused(stream, partition, time.monotonic() + within)
            self.forget(stream)
        except LiftbridgeError as exc:
            _log.info("could not resume partition %d of stream %r: %s", partition, stream, exc)
        finally:
            self._resumes.pop((stream, partition), None)

    async def resume_if_paused(self, stream: str, partition: int, deadline: float) -> bool:
        """Resume ``partition`` if the metadata leader reports it paused (``deadline``:
        monotonic time).

        Metadata comes from the metadata leader (a paused partition has no running
        leader to ask). v1.9.0 may keep reporting ``paused`` after a resume; resuming a
        running partition changes nothing on the server, so that costs one extra call.
        """
        client = self._needs_client()
        info = await client.stream_info(stream, refresh=True)
        part = info.partitions.get(partition)
        if part is None or not part.paused:
            return False
        left = max(0.5, deadline - time.monotonic())
        await client.resume_stream(stream, [partition], timeout=left)
        _log.info(
            "resumed paused partition %d of stream %r: nobody received a message published "
            "to it; sending it again",
            partition,
            stream,
        )
        return True

    async def explain_timeout(self, stream: str, partition: int, exc: AckTimeoutError) -> None:
        """Explain an ack timeout: a readonly partition raises ReadonlyPartitionError (it
        stores nothing and acks nothing); a paused one is resumed (``resume_paused``)."""
        client = self._needs_client()
        try:
            part = (await client.stream_info(stream, refresh=True)).partitions.get(partition)
        except LiftbridgeError:
            return
        if part is not None and part.readonly:
            raise ReadonlyPartitionError(
                f"partition {partition} of stream {stream!r} is readonly: it stores no new "
                "messages and acks none, so this one was not acked. Make it writable "
                "(Client.set_stream_readonly(..., readonly=False)) or publish elsewhere.",
                code="FAILED_PRECONDITION",
            ) from exc
        if part is not None and part.paused and self._resume_paused:
            with contextlib.suppress(LiftbridgeError):
                await client.resume_stream(stream, [partition], timeout=5)
                _log.info(
                    "resumed paused partition %d of stream %r after an ack timeout",
                    partition,
                    stream,
                )

    async def close(self) -> None:
        """Cancel the background resumes and wait for them to end."""
        tasks = list(self._resumes.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _needs_client(self) -> Any:
        if self._client is None:
            raise InvalidArgumentError(
                "publishing to a stream needs a control-plane client: "
                "Publisher(nc, client=Client(...))"
            )
        return self._client
