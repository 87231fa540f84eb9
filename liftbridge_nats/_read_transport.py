"""The read side's seams: where a subscription's messages come from, and what reads it.

A :class:`ReadTransport` starts a Subscribe call on a broker and hands back the call's
:class:`~._stream_reader.StreamReader`: the transport appends message bodies to it
as they arrive, grants flow control through it, and ends it with the call's status.
Two live beside each other: the HTTP/2 pool (:class:`._read_pool.H2ReadTransport`,
the network) and :class:`._memread.MemoryReads` (partitions held in memory, for
tests). Routing stays outside: the subscription asks the router which broker leads
the partition and gives the transport that address.

:class:`PartitionFeed` is what a consumer's fetcher needs of one partition's
subscription: take what is buffered, see whether the stream ended or moved to
another member, open it again. :class:`~._subscription.Subscription` implements it.

:class:`GroupRoutes` is what a consumer needs of the router beside reading: the
group coordinator's calls, cursors and partition metadata. The
:class:`~._router.Router` is one; a test may answer those calls in memory.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:
    from ._errors import LiftbridgeError
    from ._messages import Message
    from ._metadata import Metadata, MetadataCache
    from ._proto import api_pb2
    from ._proto.api_pb2_grpc import APIAsyncStub as Stub
    from ._stream_reader import Delivery, StreamReader

    # A call made on a broker's API stub with the time left for it (see ._router).
    Call = Callable[[Stub, float], Awaitable[T]]

__all__ = ["GroupRoutes", "PartitionFeed", "ReadRoutes", "ReadTransport"]


class ReadTransport(Protocol):
    """Starts Subscribe calls; each call's messages and end arrive in its reader."""

    def subscribe(
        self,
        address: str,
        request: api_pb2.SubscribeRequest,
        *,
        skip_through: int | None,
        delivery: Delivery | None = None,
    ) -> StreamReader:
        """Start a Subscribe call to the broker at ``address``; its reader, which
        drops messages at or below ``skip_through`` and counts and deserializes as
        ``delivery`` says. A call that cannot start ends in its reader (it is never
        raised here, save for a closed transport)."""
        ...

    async def close(self) -> None:
        """End every call (their readers end as cancelled) and refuse new ones."""
        ...


class ReadRoutes(Protocol):
    """What a subscription needs of the router: the partition's leader, fresh
    metadata after a break, and the client's timeout for the first subscribe."""

    @property
    def timeout(self) -> float:
        """Seconds a first subscribe may take, retries included."""
        ...

    async def leader_address(self, stream: str, partition: int, *, replica: bool = False) -> str:
        """Address of the partition's leader (or of an ISR replica)."""
        ...

    async def refresh(self) -> object:
        """Fetch the metadata again (leadership may have moved)."""
        ...


class GroupRoutes(ReadRoutes, Protocol):
    """What a consumer group member needs of the router (see :mod:`._router`)."""

    @property
    def cache(self) -> MetadataCache:
        """The metadata as last fetched."""
        ...

    async def refresh(self) -> Metadata:
        """Fetch every stream's metadata again."""
        ...

    async def fetch_metadata(
        self,
        streams: Iterable[str] | None = None,
        groups: Iterable[str] | None = None,
        *,
        timeout: float | None = None,
    ) -> Metadata:
        """Fetch the metadata of some streams and groups."""
        ...

    async def call_any(
        self, what: str, fn: Call[T], *, timeout: float | None = None, idempotent: bool = False
    ) -> T:
        """Make a call on any broker (group membership)."""
        ...

    async def call_leader(
        self,
        what: str,
        stream: str,
        partition: int,
        fn: Call[T],
        *,
        timeout: float | None = None,
        replica: bool = False,
        idempotent: bool = True,
    ) -> T:
        """Make a call on a partition's leader (cursors, partition metadata)."""
        ...

    async def call_broker(
        self, what: str, broker_id: str, fn: Call[T], *, timeout: float | None = None
    ) -> T:
        """Make a call on one named broker (the group coordinator)."""
        ...


class PartitionFeed(Protocol):
    """One partition's subscription, as a consumer's fetcher reads it."""

    @property
    def closed(self) -> bool:
        """True once the iteration has ended (stop position, close, hand-over, error)."""
        ...

    @property
    def streaming(self) -> bool:
        """Whether a server stream is current (False: :meth:`ensure_open` subscribes)."""
        ...

    @property
    def buffered(self) -> bool:
        """Whether a message (or the end of a stream, or an error) waits to be taken."""
        ...

    @property
    def handed_over(self) -> bool:
        """Whether the server ended the stream because another member took it."""
        ...

    @property
    def address(self) -> str:
        """The broker the current (or last) stream was opened to."""
        ...

    @property
    def last_offset(self) -> int | None:
        """Offset of the last message taken, None before the first."""
        ...

    def reconnect(self, why: str) -> None:
        """Drop the current stream; :meth:`ensure_open` subscribes again."""
        ...

    @property
    def refused(self) -> bool:
        """Whether the broker refused the Subscribe: a newer group epoch holds it."""
        ...

    async def start(self) -> None:
        """Subscribe now; raises if the server refuses."""
        ...

    async def ensure_open(self) -> bool:
        """Subscribe again if the stream ended; False once the iteration is over."""
        ...

    def take_many(self, limit: int) -> list[Message[Any, Any]]:
        """Up to ``limit`` buffered messages without waiting (an error met after
        some is kept for the next call)."""
        ...

    def defer_error(self, error: LiftbridgeError) -> None:
        """Raise ``error`` at the next take instead of now."""
        ...

    def peek_offset(self) -> int | None:
        """Offset of the next buffered message, not taken; None when none is."""
        ...

    def abandon(self) -> None:
        """End the iteration and cancel every call now."""
        ...
