"""liftbridge_nats.testing.MemoryTransport as an application's tests use it: publishing
with no server, what it records, and the failures it injects on request."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

import liftbridge_nats.testing
from liftbridge_nats import (
    Ack,
    AckError,
    AckPolicy,
    AckTimeoutError,
    EncryptionError,
    IncorrectOffsetError,
    InvalidArgumentError,
    MaxBytesExceededError,
    NoRespondersError,
    Publisher,
    PublishError,
    PublishRejectedError,
)
from liftbridge_nats.testing import Failure, MemoryTransport, RecordedMessage


async def test_every_publish_is_stored_and_acked_at_offsets_counted_per_subject() -> None:
    transport = MemoryTransport()
    async with Publisher(transport=transport) as pub:
        first = await pub.publish("orders", b"a", key=b"k1", headers={"h": b"1"})
        second = await pub.publish("orders", b"b")
        other = await pub.publish("orders.1", b"c")  # partition 1: counts on its own
        assert await pub.publish("orders", b"d", ack_policy=AckPolicy.NONE) is None
        after_none = await pub.publish(
            "orders", b"e", correlation_id="mine", ack_policy=AckPolicy.ALL
        )
    assert first is not None and second is not None and other is not None and after_none
    assert [first.offset, second.offset, other.offset, after_none.offset] == [0, 1, 0, 3]
    assert first.stream == "orders" and first.partition == 0 and first.error is AckError.OK
    assert first.reception_timestamp > 0
    assert after_none.correlation_id == "mine" and after_none.ack_policy is AckPolicy.ALL
    published = transport.published
    assert all(isinstance(r, RecordedMessage) for r in published)
    assert [(r.subject, r.value, r.offset) for r in published] == [
        ("orders", b"a", 0),
        ("orders", b"b", 1),
        ("orders.1", b"c", 0),
        ("orders", b"d", 2),  # stored, though nobody hears about it
        ("orders", b"e", 3),
    ]
    assert published[0].key == b"k1" and published[0].headers == {"h": b"1"}
    assert published[1].key is None and published[1].headers == {}
    assert published[0].correlation_id == first.correlation_id
    assert [r.ack_policy for r in published[3:]] == [AckPolicy.NONE, AckPolicy.ALL]
    assert all(r.failure is None and r.expected_offset is None for r in published)
    assert published[0].ack_inbox and published[0].reply_subject
    with pytest.raises(AttributeError):
        published[0].value = b"changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (AckError.INCORRECT_OFFSET, IncorrectOffsetError),
        (AckError.TOO_LARGE, MaxBytesExceededError),
        (AckError.ENCRYPTION, EncryptionError),
        (AckError.UNKNOWN, PublishRejectedError),
    ],
)
async def test_an_ack_error_raises_its_exception_and_stores_nothing(
    error: AckError, raised: type[PublishError]
) -> None:
    transport = MemoryTransport()
    transport.fail(error)
    async with Publisher(transport=transport) as pub:
        with pytest.raises(raised) as caught:
            await pub.publish("orders", b"refused", expected_offset=0)
        ack = await pub.publish("orders", b"stored")  # one failure only
    assert type(caught.value) is raised and not caught.value.maybe_stored
    assert ack is not None and ack.offset == 0
    refused, stored = transport.published
    assert refused.failure is error and refused.offset is None
    assert refused.expected_offset == 0 and caught.value.correlation_id == refused.correlation_id
    assert stored.failure is None and stored.offset == 0


async def test_no_responders_fails_at_once_and_a_retrying_publisher_sends_again() -> None:
    transport = MemoryTransport()
    transport.fail(Failure.NO_RESPONDERS)
    async with Publisher(transport=transport, ack_timeout=5) as pub:
        with pytest.raises(NoRespondersError):
            await pub.publish("orders", b"x")
    transport.fail(Failure.NO_RESPONDERS, times=2)
    async with Publisher(transport=transport, ack_timeout=5, retry=True) as pub:
        ack = await pub.publish("orders", b"y")
    assert ack is not None and ack.offset == 0
    retried = transport.published[1:]
    assert [r.failure for r in retried] == [Failure.NO_RESPONDERS] * 2 + [None]
    assert len({r.correlation_id for r in retried}) == 1  # the same message, re-sent


async def test_no_ack_makes_the_publish_time_out() -> None:
    transport = MemoryTransport()
    transport.fail(Failure.NO_ACK)
    async with Publisher(transport=transport, ack_timeout=0.05) as pub:
        with pytest.raises(AckTimeoutError):
            await pub.publish("orders", b"lost")
        assert (await pub.publish("orders", b"kept")) is not None
    assert [(r.failure, r.offset) for r in transport.published] == [
        (Failure.NO_ACK, None),
        (None, 0),
    ]


async def test_failures_by_subject_last_until_cleared_and_apply_in_order() -> None:
    transport = MemoryTransport()
    transport.fail(AckError.TOO_LARGE, subject="big", times=None)
    transport.fail(Failure.NO_RESPONDERS, times=1)
    async with Publisher(transport=transport) as pub:
        results = await asyncio.gather(
            pub.publish("big", b"1"),
            pub.publish("small", b"2"),  # takes the one-off no-responders rule
            pub.publish("small", b"3"),
            pub.publish("big", b"4"),
            pub.publish("big", b"5", ack_policy=AckPolicy.NONE),  # never failed
            return_exceptions=True,
        )
        transport.clear_failures()
        again = await pub.publish("big", b"6")
    assert [("Ack" if isinstance(r, Ack) else type(r).__name__) for r in results] == [
        "MaxBytesExceededError",
        "NoRespondersError",
        "Ack",
        "MaxBytesExceededError",
        "NoneType",
    ]
    assert again is not None and again.offset == 1  # b"5" was stored at 0


def test_fail_refuses_what_is_no_failure() -> None:
    transport = MemoryTransport()
    with pytest.raises(InvalidArgumentError, match="OK"):
        transport.fail(AckError.OK)
    with pytest.raises(TypeError):
        transport.fail(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        transport.fail(Failure.NO_ACK, times=0)
    with pytest.raises(TypeError):
        transport.fail(Failure.NO_ACK, times=True)
    with pytest.raises(TypeError):
        transport.fail(Failure.NO_ACK, subject=b"orders")  # type: ignore[arg-type]


async def test_a_responder_answers_instead_and_failures_still_come_first() -> None:
    seen: list[str] = []

    def responder(transport: MemoryTransport, sent: liftbridge_nats.testing.Sent) -> None:
        seen.append(sent.subject)
        transport.ack(sent, offset=41)

    transport = MemoryTransport(responder=responder)
    transport.fail(Failure.NO_RESPONDERS)
    async with Publisher(transport=transport) as pub:
        with pytest.raises(NoRespondersError):
            await pub.publish("orders", b"x")
        ack = await pub.publish("orders", b"y")
    assert ack is not None and ack.offset == 41 and seen == ["orders"]
    assert transport.published[1].offset == 41


def test_the_harness_names_load_on_first_use_and_stay_importable() -> None:
    testing = liftbridge_nats.testing
    assert {"LocalCluster", "ContainerCluster", "SparkStandalone", "MemoryTransport"} <= set(
        dir(testing)
    )
    for name in testing.__all__:
        assert getattr(testing, name) is not None, name
    with pytest.raises(AttributeError):
        _ = testing.NoSuchThing  # type: ignore[attr-defined]


def test_importing_the_doubles_needs_only_the_runtime_dependencies() -> None:
    # What only the testing and spark extras bring is refused outright: the import must
    # not touch it, nor the server harness, which is loaded on first use.
    code = textwrap.dedent(
        """
        import sys
        from importlib.abc import MetaPathFinder

        EXTRAS = {"testcontainers", "docker", "pyspark", "pandas", "pytest", "_pytest",
                  "cryptography", "nkeys", "opentelemetry", "msgspec"}

        class Refuse(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in EXTRAS:
                    raise ImportError(f"{name} is not installed")
                return None

        sys.meta_path.insert(0, Refuse())
        from liftbridge_nats.testing import Failure, MemoryTransport, RecordedMessage
        assert MemoryTransport().published == []
        harness = [m for m in sys.modules if m.startswith("liftbridge_nats.testing._")]
        assert harness == ["liftbridge_nats.testing._memory"], harness
        try:
            import pytest
        except ImportError:
            pass
        else:
            raise AssertionError("the refusal did not work")
        """
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
