"""``Publisher(transport=...)``: a publish transport by keyword, or a nats-py client as
``nc``, exactly one of the two; and the transport still accepted as ``nc``."""

from __future__ import annotations

import pytest

from liftbridge_nats import InvalidArgumentError, Publisher
from liftbridge_nats._memtransport import MemoryTransport, auto_ack


@pytest.mark.parametrize("as_keyword", [True, False])
async def test_a_transport_by_keyword_or_as_nc_publishes(as_keyword: bool) -> None:
    transport = MemoryTransport(responder=auto_ack)
    pub = Publisher(transport=transport) if as_keyword else Publisher(transport)
    async with pub:
        ack = await pub.publish("orders", b"v")
    assert ack is not None and ack.offset == 0
    assert [sent.subject for sent in transport.delivered] == ["orders"]


def test_neither_nc_nor_transport_is_refused() -> None:
    with pytest.raises(TypeError, match="got neither"):
        Publisher()
    with pytest.raises(TypeError, match="got neither"):
        Publisher(None, transport=None)


def test_both_nc_and_transport_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="not both"):
        Publisher(MemoryTransport(), transport=MemoryTransport())


def test_a_transport_that_is_no_transport_is_refused() -> None:
    with pytest.raises(TypeError, match="transport must be a PublishTransport"):
        Publisher(transport=object())  # type: ignore[arg-type]
