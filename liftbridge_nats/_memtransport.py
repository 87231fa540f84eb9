"""The memory transport as the publisher's own unit tests drive it: it answers nothing.

The transport itself is public, :class:`liftbridge_nats.testing.MemoryTransport`, and
by default stores and acks every message. The SDK's tests of ordering, backpressure,
deadlines, cancellation and close want to answer each message themselves (with
:meth:`~MemoryTransport.ack` or :meth:`~MemoryTransport.no_responders`, when they
choose), or through a ``responder`` such as :func:`auto_ack`: this subclass changes
only that default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from ._messages import AckPolicy
from .testing._memory import MemoryTransport as _MemoryTransport
from .testing._memory import Responder, Sent

__all__ = ["MemoryTransport", "Sent", "auto_ack"]


def _silent(transport: _MemoryTransport, sent: Sent) -> None:
    """Leave every message unanswered: the test answers."""


class MemoryTransport(_MemoryTransport):
    """:class:`liftbridge_nats.testing.MemoryTransport` whose messages wait for the
    test to answer them, unless a ``responder`` is given."""

    # The tests' responders take this class: the transport passes itself, so it is one.
    responder: Callable[[MemoryTransport, Sent], None] | None  # type: ignore[assignment]

    def __init__(
        self,
        *,
        responder: Callable[[MemoryTransport, Sent], None] | None = None,
        buffer_limit: int = 0,
        max_payload: int = 1024 * 1024,
        fast_path: bool = True,
    ) -> None:
        super().__init__(
            responder=cast(Responder, responder or _silent),
            buffer_limit=buffer_limit,
            max_payload=max_payload,
            fast_path=fast_path,
        )


def auto_ack(transport: _MemoryTransport, sent: Sent) -> None:
    """A responder that acks every message that asks for an ack, in order; the others
    take no offset (the public transport's default stores them too)."""
    msg = sent.published
    if msg.ack_inbox and msg.ack_policy is not AckPolicy.NONE:
        transport.ack(sent)
