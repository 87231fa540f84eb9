"""The codec against a real server, with nothing of the SDK between them but the raw
generated gRPC stub: a plain NATS value and an enveloped message with an ack inbox go
in, an ack comes back, and both read back through Subscribe."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from liftbridge_nats import AckError, AckPolicy, wire
from liftbridge_nats._proto import api_pb2, api_pb2_grpc
from liftbridge_nats.testing import LocalCluster


async def test_plain_and_enveloped_messages_are_stored_and_acked(
    liftbridge_cluster: LocalCluster, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("wire")
    async with grpc.aio.insecure_channel(liftbridge_cluster.brokers[0]) as channel:
        stub = api_pb2_grpc.APIStub(channel)
        await stub.CreateStream(api_pb2.CreateStreamRequest(subject=name, name=name))

        inbox = nats_client.new_inbox()
        acks: asyncio.Queue[bytes] = asyncio.Queue()

        async def on_ack(msg: Msg) -> None:
            await acks.put(msg.data)

        sub = await nats_client.subscribe(inbox, cb=on_ack)
        await nats_client.publish(name, b"plain nats payload")
        envelope = wire.encode_publish(
            b"enveloped value",
            key=b"k-1",
            headers={"h": b"v"},
            ack_inbox=inbox,
            correlation_id="cid-1",
            ack_policy=AckPolicy.ALL,
            crc=True,
        )
        await nats_client.publish(name, envelope)
        await nats_client.flush()

        ack = wire.decode_ack(await asyncio.wait_for(acks.get(), 10))
        assert ack.correlation_id == "cid-1"
        assert ack.error is AckError.OK
        assert ack.stream == name
        assert ack.offset == 1  # the plain message took offset 0
        assert ack.ack_policy is AckPolicy.ALL
        await sub.unsubscribe()

        call = stub.Subscribe(
            api_pb2.SubscribeRequest(stream=name, startPosition=api_pb2.EARLIEST), timeout=10
        )
        stored: list[api_pb2.Message] = []
        async for m in call:
            # The server opens a subscription with an empty message to confirm it.
            if m.value or m.offset:
                stored.append(m)
            if len(stored) == 2:
                break
        call.cancel()
        assert [m.offset for m in stored] == [0, 1]
        plain, enveloped = stored
        assert plain.value == b"plain nats payload" and plain.key == b""
        assert enveloped.value == b"enveloped value"
        assert enveloped.key == b"k-1"
        assert enveloped.headers["h"] == b"v"
        assert enveloped.subject == name
