"""One Spark task's read: the messages of one :class:`OffsetRange`, in chunks.

A Subscribe from the range's first offset, stopped at its last, over the process's
cached client, on its one background event loop. Every offset of the range was committed when the range was planned, so a
message whose offset jumps ahead, or a subscription that ends early, means offsets
were removed since (retention, compaction, a recreated stream): that is data loss,
reported as ``failOnDataLoss`` says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from liftbridge_nats import (
    BrokerUnavailableError,
    Client,
    NotConnectedError,
    RpcTimeoutError,
    StartPosition,
    StopPosition,
    Subscription,
)
from liftbridge_nats._proto import api_pb2
from liftbridge_nats.sync import _portal

from . import _connections
from ._columns import Columns
from ._dataloss import data_loss, missing_offsets
from ._lookup import first_offset
from ._options import ReadOptions
from ._planning import OffsetRange
from ._positions import EARLIEST

__all__ = ["PartitionReader", "iter_range"]


class PartitionReader:
    """Reads one :class:`OffsetRange` in chunks, on an event loop its caller drives.

    The client is the process's cached one: closing the reader closes its
    subscription only.
    """

    def __init__(self, opts: ReadOptions, rng: OffsetRange) -> None:
        self._rng = rng
        self._opts = opts
        self._lb: Client | None = None
        self._sub: Subscription | None = None
        self._next = rng.from_offset
        self.skipped = 0
        """Offsets of the range found gone (with ``failOnDataLoss`` false)."""
        self.done = rng.count == 0

    async def open(self) -> None:
        """Take the process's client and subscribe at the range's first offset."""
        if self.done:
            return
        opts = self._opts
        self._lb = await _connections.client(opts.brokers, opts.timeout, opts.tls)
        await self._subscribe(self._rng.from_offset)

    @property
    def _client(self) -> Client:
        assert self._lb is not None, "open() first"
        return self._lb

    async def _subscribe(self, offset: int) -> None:
        self._sub = self._client.subscribe(
            self._rng.stream,
            partition=self._rng.partition,
            start_position=StartPosition.OFFSET,
            start_offset=offset,
            stop_position=StopPosition.OFFSET,
            stop_offset=self._rng.until_offset - 1,
            # Paused after planning (auto-pause when idle): resume rather than fail.
            resume=self._opts.resume_paused,
        )
        await self._sub.start()

    def _gap(self, until: int) -> None:
        """Offsets ``[self._next, until)`` are gone."""
        rng = self._rng
        data_loss(
            self._opts.fail_on_data_loss,
            missing_offsets(rng.stream, rng.partition, self._next, until),
        )
        self.skipped += until - self._next
        self._next = until

    async def _probe(self) -> None:
        """After a silence: are the offsets still to read gone?

        A subscription from an offset that retention removed, on a partition with
        nothing stored after it, waits for the next message instead of ending. When
        the leader says the offsets are committed but the oldest offset stored is
        past them, they are gone: report the gap and go on from the oldest offset.
        """
        rng = self._rng
        hw = (await self._client.fetch_partition_metadata(rng.stream, rng.partition)).high_watermark
        if hw < self._next:
            return  # not committed on this leader (yet): keep waiting
        oldest = await first_offset(
            self._client,
            rng.stream,
            rng.partition,
            EARLIEST,
            hw,
            resume=self._opts.resume_paused,
            wait=self._opts.timeout,
        )
        if oldest <= self._next:
            return
        self._gap(min(oldest, rng.until_offset))
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.aclose()
        if self._next >= rng.until_offset:
            self.done = True
        else:
            await self._subscribe(self._next)

    def _take(self, pb: api_pb2.Message, out: Columns) -> None:
        """Add ``pb`` to ``out`` unless it lies past the range; note gaps before it."""
        offset, until = pb.offset, self._rng.until_offset
        if offset < self._next:
            return  # delivered already (the subscription drops these itself, too)
        if offset != self._next:
            self._gap(min(offset, until))
        if offset >= until:
            self.done = True
            return
        self._next = offset + 1
        out.add_protos((pb,))
        if self._next >= until:
            self.done = True

    async def _fill(self, sub: Subscription, out: Columns, size: int) -> None:
        """Read into ``out`` until it holds ``size`` messages or the range ends."""
        # The subscription hands over what it has buffered, parsed but not built into
        # Messages; the fields go straight into the columns. One check per batch on the
        # usual path (the offsets that come next, all inside the range); anything else
        # goes message by message through _take.
        until = self._rng.until_offset
        take = sub.take_protos
        while (want := size - len(out)) > 0:
            pbs = take(want)
            if not pbs:
                if sub.closed:
                    if self._next < until:
                        self._gap(until)
                    self.done = True
                    return
                await sub.wait_buffered()
                continue
            expected = self._next
            n = len(pbs)
            last = expected + n - 1
            # Offsets only grow: the first and the last in place means all are.
            if pbs[0].offset == expected and pbs[-1].offset == last and last < until - 1:
                out.add_protos(pbs, expected)
                self._next = last + 1
                continue
            for pb in pbs:
                self._take(pb, out)
                if self.done:
                    return

    async def chunk(self, size: int) -> Columns:
        """Up to ``size`` more messages of the range; sets :attr:`done` at its end."""
        out = Columns(self._rng.stream, self._rng.partition)
        # Every message up to the planned end is committed, so a silence means
        # something is wrong: first look whether the offsets are gone (data loss),
        # then, after three times the timeout, fail the task so that Spark retries it
        # rather than hang (a leader that never came back). One timer per chunk, not
        # per message: a cancelled read loses nothing (it waits in the buffer).
        wait = self._opts.timeout
        silent = 0.0
        while not self.done:
            sub = self._sub
            if sub is None:
                self.done = True
                break
            try:
                async with asyncio.timeout(wait):
                    await self._fill(sub, out, size)
                if len(out) >= size or self.done:
                    break
            except TimeoutError:
                if out:
                    break  # progress: hand over what came
                silent += wait
                if silent >= 3 * wait:
                    rng = self._rng
                    raise RpcTimeoutError(
                        f"stream {rng.stream!r} partition {rng.partition}: no message for "
                        f"{silent:.0f} s while reading offset {self._next} of "
                        f"[{rng.from_offset}, {rng.until_offset}); check the partition's "
                        "leader, or raise the 'timeout' option.",
                        code="DEADLINE_EXCEEDED",
                    ) from None
                await self._probe()
        return out

    async def close(self, failed: BaseException | None = None) -> None:
        """Close the subscription; after ``failed``, a connection error, drop the
        process's client too, so that Spark's retry of the task connects afresh."""
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.aclose()
        if isinstance(failed, BrokerUnavailableError | NotConnectedError) and self._lb is not None:
            await _connections.discard(self._lb)


def iter_range(opts: ReadOptions, rng: OffsetRange, chunk_size: int) -> Iterator[Columns]:
    """Chunks of messages of ``rng``, pulled on the process's background loop.

    The subscription lives on that loop across the chunks; it is closed when the
    generator finishes or is closed early, e.g. by a ``limit()`` that needs no more
    rows.
    """
    if rng.count == 0:
        return
    reader = PartitionReader(opts, rng)
    failed: BaseException | None = None
    try:
        _portal.call(reader.open)
        while not reader.done:
            chunk = _portal.call(reader.chunk, chunk_size)
            if chunk:
                yield chunk
    except BaseException as exc:
        failed = exc
        raise
    finally:
        _portal.call(reader.close, failed)
