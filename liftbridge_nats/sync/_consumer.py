"""The blocking consumer-group member: the async Consumer on the shared loop.

Iteration takes one message per hop to the loop on purpose: the async consumer counts
a message as delivered when it hands it over, and its periodic checkpoint commits
that position, so a batch taken ahead of the caller would be committed before being
processed. ``getmany`` takes batches, as its async twin does (what it returns counts
as delivered).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

from anyio.from_thread import BlockingPortal

from .._consumer import StreamPartition
from .._messages import K, Message, V
from ._bridge import on_loop, run
from ._portal import check_blocking_allowed, submit, wait

if TYPE_CHECKING:
    from .._consumer import Consumer as AsyncConsumer
    from .._lag import PartitionLag

__all__ = ["Consumer"]

T = TypeVar("T")


class Consumer(Generic[V, K]):
    """A consumer-group member for plain threads; made by :meth:`Client.consumer`.

    The blocking face of :class:`liftbridge_nats.Consumer`: the same methods and
    keyword arguments, each blocking until done. ``with client.consumer(group,
    streams) as consumer: for msg in consumer: ...`` joins the group, and leaves it
    (after a last commit) at the block's end. Use it from one thread at a time.
    """

    def __init__(self, aio: AsyncConsumer[V, K], portal: BlockingPortal) -> None:
        self._aio = aio
        self._portal = portal

    # ------------------------------------------------------------------ state

    @property
    def aio(self) -> AsyncConsumer[V, K]:
        """The async :class:`liftbridge_nats.Consumer` underneath; use it only on the
        SDK's loop (in a rebalance listener, say)."""
        return self._aio

    @property
    def group_id(self) -> str:
        """The consumer group's id."""
        return self._aio.group_id

    @property
    def consumer_id(self) -> str:
        """This member's id in the group."""
        return self._aio.consumer_id

    @property
    def streams(self) -> tuple[str, ...]:
        """The streams the group reads."""
        return self._aio.streams

    @property
    def cursor_id(self) -> str:
        """The cursor id the group's positions are stored under."""
        return self._aio.cursor_id

    @property
    def epoch(self) -> int | None:
        """The group epoch of the current assignment (None before joining)."""
        return self._get("epoch", lambda aio: aio.epoch)

    @property
    def coordinator(self) -> str | None:
        """Broker id of the group's coordinator, as last seen."""
        return self._get("coordinator", lambda aio: aio.coordinator)

    @property
    def assignments(self) -> frozenset[StreamPartition]:
        """The partitions this member reads now."""
        return self._get("assignments", lambda aio: aio.assignments)

    def assignment(self) -> frozenset[StreamPartition]:
        """The partitions this member reads now (aiokafka's name for
        :attr:`assignments`)."""
        return self.assignments

    @property
    def positions(self) -> dict[tuple[str, int], int]:
        """Offset of the last message delivered per assigned partition (a copy)."""
        return self._get("positions", lambda aio: aio.positions)

    def paused(self) -> frozenset[StreamPartition]:
        """The partitions paused with :meth:`pause`."""
        return on_loop(self._portal, self._aio.paused)

    def _get(self, name: str, read: Callable[[AsyncConsumer[V, K]], T]) -> T:
        """A property of the async consumer, read on the loop where it changes."""
        check_blocking_allowed(
            f"liftbridge_nats.sync.Consumer.{name}", f"`liftbridge_nats.Consumer.{name}`"
        )

        async def go() -> T:
            return read(self._aio)

        return wait(submit(go, portal=self._portal))

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Consumer[V, K]:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Join the group and start reading what it assigns."""
        run(self._portal, self._aio.start)

    def close(self) -> None:
        """Stop reading, commit what was delivered, leave the group (idempotent; see
        :meth:`liftbridge_nats.Consumer.close`)."""
        run(self._portal, self._aio.close)

    def wait_for_assignment(self, timeout: float | None = None) -> frozenset[StreamPartition]:
        """Block until the coordinator assigned this member at least one partition."""
        return run(self._portal, self._aio.wait_for_assignment, timeout)

    # ------------------------------------------------------------------ reading

    def __iter__(self) -> Consumer[V, K]:
        return self

    def __next__(self) -> Message[V, K]:
        check_blocking_allowed(
            "iterating a liftbridge_nats.sync.Consumer",
            "`async for message in consumer` (liftbridge_nats.Consumer)",
        )
        found, message = wait(submit(self._next, portal=self._portal))
        if not found:
            raise StopIteration
        return message  # type: ignore[return-value]  # found: a message

    async def _next(self) -> tuple[bool, Message[V, K] | None]:
        try:
            return True, await anext(self._aio)
        except StopAsyncIteration:
            return False, None

    def getmany(
        self,
        *partitions: tuple[str, int],
        timeout: float = 0.0,
        max_records: int | None = None,
    ) -> dict[StreamPartition, list[Message[V, K]]]:
        """Messages per partition: what is buffered, or the first to arrive within
        ``timeout`` seconds (see :meth:`liftbridge_nats.Consumer.getmany`)."""
        return run(
            self._portal, self._aio.getmany, *partitions, timeout=timeout, max_records=max_records
        )

    def getone(self, *partitions: tuple[str, int]) -> Message[V, K]:
        """The next message (of ``partitions``, default all), blocking until one comes."""
        return run(self._portal, self._aio.getone, *partitions)

    # ------------------------------------------------------------------ positions

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """Deliver ``partition`` from ``offset`` next (see
        :meth:`liftbridge_nats.Consumer.seek`)."""
        on_loop(self._portal, self._aio.seek, partition, offset)

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Deliver these partitions (default: all assigned) from their oldest message."""
        run(self._portal, self._aio.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Deliver these partitions (default: all assigned) from the next message
        published."""
        run(self._portal, self._aio.seek_to_end, *partitions)

    def position(self, partition: tuple[str, int]) -> int:
        """The offset of the next message this member will deliver from ``partition``."""
        return run(self._portal, self._aio.position, partition)

    def committed(self, partition: tuple[str, int], *, timeout: float | None = None) -> int | None:
        """The group's committed position on ``partition`` (the next offset to read),
        None when none is stored."""
        return run(self._portal, self._aio.committed, partition, timeout=timeout)

    def commit(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        """Commit positions now (see :meth:`liftbridge_nats.Consumer.commit`)."""
        run(self._portal, self._aio.commit, offsets)

    def checkpoint(self) -> None:
        """Store the position of every partition that moved since the last commit."""
        run(self._portal, self._aio.checkpoint)

    def lag(self, *, timeout: float | None = None) -> list[PartitionLag]:
        """The group's lag on every partition of its streams."""
        return run(self._portal, self._aio.lag, timeout=timeout)

    # ------------------------------------------------------------------ flow

    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop delivering from these partitions until :meth:`resume`."""
        on_loop(self._portal, self._aio.pause, *partitions)

    def resume(self, *partitions: tuple[str, int]) -> None:
        """Deliver again from paused partitions."""
        on_loop(self._portal, self._aio.resume, *partitions)
