"""The Publisher against a real 1-node cluster: ack policies, offsets where the messages
really are, optimistic concurrency, errors, cancellation, close, a 100k pipeline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from _publisher_helpers import acked, read_all, user_headers

from liftbridge_nats import (
    Ack,
    AckError,
    AckLostError,
    AckPolicy,
    AckTimeoutError,
    Client,
    IncorrectOffsetError,
    InvalidArgumentError,
    LocalError,
    MaxPayloadExceededError,
    MessageTooLargeError,
    NoRespondersError,
    Publisher,
    PublisherClosedError,
    PublishRecord,
)
from liftbridge_nats.envelope import MsgType, encode


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "nats-py-public-api"])
async def test_policies_offsets_match_storage(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any, fast: bool
) -> None:
    name = unique_name("pol")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with Publisher(nats_client, fast_path=fast) as pub:
            # The fast path must really be in use with the nats-py pyproject allows.
            assert pub.fast_path.enabled is fast, pub.fast_path.reason
            assert bool(pub.fast_path) is fast
            acked: dict[int, bytes] = {}
            none_values = []
            for i in range(30):
                policy = (AckPolicy.LEADER, AckPolicy.ALL, AckPolicy.NONE)[i % 3]
                value = b"value-%d" % i
                ack = await pub.publish(name, value, ack_policy=policy)
                if policy is AckPolicy.NONE:
                    assert ack is None
                    none_values.append(value)
                    continue
                assert isinstance(ack, Ack)
                assert ack.stream == name and ack.partition_subject == name
                assert ack.message_subject == name
                assert ack.ack_policy is policy
                assert ack.ack_inbox == pub.ack_inbox
                assert ack.correlation_id and ack.error is AckError.OK
                assert ack.commit_timestamp >= ack.reception_timestamp > 0
                acked[ack.offset] = value
            offsets = list(acked)
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
            stats = pub.stats
            assert stats.acked == 20 and stats.published == 30 and stats.pending == 0
            if fast:
                assert stats.fast_path_sent == 30 and stats.public_api_sent == 0
            else:
                assert stats.fast_path_sent == 0 and stats.public_api_sent == 30
        # The last message had no ack to wait for: give it a moment to be stored.
        stored = await read_all(client, name)
        for _ in range(50):
            if len(stored) == 30:
                break
            await asyncio.sleep(0.1)
            stored = await read_all(client, name)
    # Every acked offset holds exactly the value acked for it; NONE messages are stored too.
    assert [m.offset for m in stored] == list(range(30))
    for offset, value in acked.items():
        assert stored[offset].value == value
    assert sorted(m.value for m in stored if m.offset not in acked) == sorted(none_values)


@pytest.mark.slow
async def test_100k_pipelined_every_ack_matched_and_read_back(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("pipe")
    n = 100_000
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with Publisher(nats_client, max_inflight=8192) as pub:
            futures = []
            for i in range(n):
                if i % 2:
                    fut = await pub.publish_async(name, b"v%d" % i)
                else:
                    fut = await pub.publish_async(
                        name, b"v%d" % i, key=b"k%d" % (i % 97), headers={"i": b"%d" % i}
                    )
                assert pub.pending <= 8192
                futures.append(fut)
            acks = acked(await asyncio.gather(*futures))
            assert pub.stats.acked == n and pub.stats.acks_unmatched == 0
        assert [a.offset for a in acks] == list(range(n))
        assert len({a.correlation_id for a in acks}) == n
        stored = await read_all(client, name)
    assert len(stored) == n
    for i, msg in enumerate(stored):
        assert msg.offset == i and msg.value == b"v%d" % i
        if i % 2:
            assert msg.key is None and user_headers(msg) == {}
        else:
            assert msg.key == b"k%d" % (i % 97)
            assert user_headers(msg) == {"i": b"%d" % i}


async def test_batch_records_and_crc(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("batch")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
        async with Publisher(nats_client, crc=True) as pub:
            items: list[bytes | PublishRecord] = []
            for i in range(50):
                items.append(b"plain")
                items.append(
                    PublishRecord(b"rec", key=b"k", headers={"h": b"1"}, correlation_id=f"id-{i}")
                )
            acks = await pub.publish_batch(name, items, ack_policy=AckPolicy.ALL)
            assert [a.offset for a in acks] == list(range(100))
            assert acks[1].correlation_id == "id-0"
            # A correlation id that is still in flight is refused before sending.
            pending = await pub.publish_async(name, b"x", correlation_id="dup")
            with pytest.raises(InvalidArgumentError, match="already in flight"):
                await pub.publish_async(name, b"y", correlation_id="dup")
            assert (await pending) is not None
            results = await pub.publish_batch(
                name,
                [PublishRecord(b"ok"), PublishRecord(b"no", expected_offset=0)],
                return_exceptions=True,
            )
            assert isinstance(results[0], Ack)
        stored = await read_all(client, name)
    assert stored[1].key == b"k" and user_headers(stored[1]) == {"h": b"1"}
    assert stored[0].value == b"plain" and stored[99].value == b"rec"


async def test_optimistic_concurrency(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("occ")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name, optimistic_concurrency_control=True)
        async with Publisher(nats_client) as pub:
            first = await pub.publish(name, b"a", expected_offset=0)
            assert first is not None and first.offset == 0
            # No expected offset sends -1 ("no check"), which an OCC stream accepts.
            second = await pub.publish(name, b"b")
            assert second is not None and second.offset == 1
            third = await pub.publish(name, b"c", expected_offset=2)
            assert third is not None and third.offset == 2
            with pytest.raises(IncorrectOffsetError) as err:
                await pub.publish(name, b"stale", expected_offset=2)
            assert err.value.subject == name and err.value.correlation_id
            assert "expected_offset" in str(err.value)
            assert pub.stats.rejected == 1
        stored = await read_all(client, name)
    assert [m.value for m in stored] == [b"a", b"b", b"c"]


async def test_subject_without_stream(nats_client: Any, unique_name: Any) -> None:
    subject = unique_name("nostream")
    async with Publisher(nats_client) as pub:
        started = time.monotonic()
        with pytest.raises(NoRespondersError) as err:
            await pub.publish(subject, b"x", timeout=10)
        assert time.monotonic() - started < 2  # NATS says so at once: no 10 s wait
        # An answer, not a timeout: certainly not stored, and no `except TimeoutError` takes it.
        assert not isinstance(err.value, TimeoutError) and not err.value.maybe_stored
        assert "no stream" in str(err.value) and "paused" in str(err.value)
        assert pub.stats.no_responders == 1 and pub.pending == 0
    async with Publisher(nats_client, no_responders=False, ack_timeout=0.5) as pub:
        started = time.monotonic()
        with pytest.raises(AckTimeoutError) as timeout_err:
            await pub.publish(subject, b"x")
        assert 0.45 < time.monotonic() - started < 3
        assert not isinstance(timeout_err.value, NoRespondersError)
        message = str(timeout_err.value)
        assert "no stream may be attached" in message and "paused" in message
        assert pub.stats.timed_out == 1 and pub.pending == 0


async def test_inbox_keeps_the_connections_prefix_and_stored_ids_stay_short(
    liftbridge_cluster: Any, unique_name: Any
) -> None:
    # Liftbridge stores each message's ack inbox, reply subject and correlation id with
    # it: they keep the connection's inbox prefix (NATS permissions may name it) with a
    # short random token, and no-responders still reaches the publisher through them.
    import nats

    name = unique_name("inbox")
    nc = await nats.connect(liftbridge_cluster.nats_url, inbox_prefix="app.inbox")
    try:
        async with Client(liftbridge_cluster.brokers) as client:
            await client.create_stream(name, name)
            async with Publisher(nc, client=client) as first, Publisher(nc) as second:
                acks = [await pub.publish(name, b"x") for pub in (first, second)]
                by_stream = await first.publish_to_stream(name, b"y")
                with pytest.raises(NoRespondersError):
                    await first.publish(unique_name("nostream"), b"x", timeout=10)
            # The client's gRPC publishes make their ids the same way, one source each.
            over_grpc = [
                await client.publish_to_stream(name, b"g"),
                await client.publish(name, b"h"),
                await (await client.publish_to_stream_async(name, b"i")),
            ]
            stored = await read_all(client, name)
    finally:
        await nc.close()
    # publish_to_stream makes its id before it sends: its reply subject is as short.
    assert by_stream is not None and by_stream.correlation_id[8:] == "-2"
    assert stored[2].reply_subject == by_stream.ack_inbox.removesuffix(".ack") + ".2"
    inboxes = set()
    for ack, message in zip(acks, stored[:2], strict=True):
        assert ack is not None
        inboxes.add(ack.ack_inbox)
        prefix, token, suffix = ack.ack_inbox.rsplit(".", 2)
        assert (prefix, len(token), suffix) == ("app.inbox", 11, "ack")
        # The id: a random part of 8 characters, a dash and the counter; the reply
        # subject: the inbox and the counter.
        assert ack.correlation_id[8:] == "-1"
        assert message.reply_subject == f"app.inbox.{token}.1"
    assert len(inboxes) == 2  # one of its own for each publisher
    grpc_ids = [ack.correlation_id for ack in over_grpc if ack is not None]
    assert [cid[8:] for cid in grpc_ids] == ["-1", "-2", "-3"]
    assert len({cid[:8] for cid in grpc_ids}) == 1


async def test_too_large_for_nats_is_refused_before_sending(
    nats_client: Any, unique_name: Any
) -> None:
    async with Publisher(nats_client) as pub:
        before = nats_client.stats["out_msgs"]
        with pytest.raises(MaxPayloadExceededError, match="max_payload"):
            await pub.publish(unique_name("big"), b"x" * nats_client.max_payload)
        with pytest.raises(MaxPayloadExceededError) as info:
            await pub.publish_async(unique_name("big"), b"x" * (nats_client.max_payload + 1))
        assert isinstance(info.value, MessageTooLargeError | LocalError)
        assert not info.value.maybe_stored
        assert nats_client.stats["out_msgs"] == before
        assert pub.pending == 0 and pub.stats.published == 0


async def test_cancelling_a_waiting_publish_leaves_nothing_pending(
    nats_client: Any, unique_name: Any
) -> None:
    async with Publisher(nats_client, no_responders=False) as pub:
        task = asyncio.create_task(pub.publish(unique_name("void"), b"x", timeout=30))
        await asyncio.sleep(0.1)
        assert pub.pending == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pub.pending == 0


async def test_close_waits_for_acks_then_fails_the_rest(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("close")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
    pub = Publisher(nats_client, no_responders=False)
    await pub.start()
    acked = [await pub.publish_async(name, b"%d" % i) for i in range(200)]
    lost = await pub.publish_async(unique_name("void"), b"never acked", timeout=60)
    started = time.monotonic()
    await pub.close(timeout=0.5)
    assert 0.4 < time.monotonic() - started < 5
    assert all(isinstance(f.result(), Ack) for f in acked)  # acked during close
    # Sent and never acked: maybe stored, so not "closed, not sent".
    with pytest.raises(AckLostError, match="may or may not have been stored") as info:
        lost.result()
    assert info.value.maybe_stored and not isinstance(info.value, PublisherClosedError)
    assert pub.closed and pub.pending == 0
    await pub.close()  # idempotent
    with pytest.raises(PublisherClosedError):
        await pub.publish(name, b"late")
    with pytest.raises(PublisherClosedError):
        await pub.publish_async(name, b"late")
    # The ack subscription is gone: nothing of the publisher is left on the connection.
    assert not any(s.subject.startswith("_INBOX.") for s in nats_client._subs.values())


async def test_backpressure_bounds_inflight(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("bp")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
    async with Publisher(nats_client, max_inflight=8) as pub:
        futures = []
        for i in range(500):
            futures.append(await pub.publish_async(name, b"%d" % i))
            assert pub.pending <= 8
        acks = acked(await asyncio.gather(*futures))
    assert [a.offset for a in acks] == list(range(500))


async def test_inbox_garbage_is_counted_not_raised(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    name = unique_name("junk")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(name, name)
    async with Publisher(nats_client) as pub:
        await nats_client.publish(pub.ack_inbox, b"not an envelope")
        await nats_client.publish(pub.ack_inbox, encode(MsgType.ACK, b"\xff\xff"))
        await nats_client.publish(pub.ack_inbox, encode(MsgType.PUBLISH, b""))
        ack = await pub.publish(name, b"real")
        # Replay the real ack: its correlation id is settled already.
        from liftbridge_nats._proto import api_pb2

        pb = api_pb2.Ack(stream=name, correlationId=ack.correlation_id if ack else "")
        await nats_client.publish(pub.ack_inbox, encode(MsgType.ACK, pb.SerializeToString()))
        await nats_client.flush()
        assert await pub.publish(name, b"still works") is not None
        stats = pub.stats
        assert stats.malformed == 2 and stats.foreign == 1 and stats.acks_unmatched == 1
        assert stats.acked == 2


async def test_argument_checks_send_nothing(nats_client: Any) -> None:
    async with Publisher(nats_client) as pub:
        for subject in ["", "a b", "a.*", "a.>", "a..b", ".a"]:
            with pytest.raises(InvalidArgumentError):
                await pub.publish(subject, b"x")
        with pytest.raises(TypeError):
            await pub.publish("s", "text")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await pub.publish("s", b"x", key="k")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await pub.publish("s", b"x", headers={"h": "v"})  # type: ignore[dict-item]
        with pytest.raises(InvalidArgumentError):
            await pub.publish("s", b"x", ack_policy=1)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await pub.publish("s", b"x", expected_offset=-2)
        with pytest.raises(InvalidArgumentError):
            await pub.publish("s", b"x", timeout=0)
        with pytest.raises(InvalidArgumentError):
            await pub.publish("s", b"x", correlation_id="")
        assert pub.stats.published == 0 and pub.pending == 0
    bad: list[dict[str, Any]] = [{"ack_timeout": 0}, {"max_inflight": 0}]
    for kwargs in bad:
        with pytest.raises(InvalidArgumentError):
            Publisher(nats_client, **kwargs)


async def test_two_streams_on_one_subject_first_ack_wins(
    liftbridge_cluster: Any, nats_client: Any, unique_name: Any
) -> None:
    subject = unique_name("fan")
    async with Client(liftbridge_cluster.brokers) as client:
        await client.create_stream(subject, unique_name("a"))
        await client.create_stream(subject, unique_name("b"))
        async with Publisher(nats_client) as pub:
            ack = await pub.publish(subject, b"both")
            assert ack is not None
            # The second stream's ack arrives for a settled correlation id: counted.
            for _ in range(50):
                if pub.stats.acks_unmatched == 1:
                    break
                await asyncio.sleep(0.05)
            assert pub.stats.acks_unmatched == 1 and pub.stats.acked == 1
