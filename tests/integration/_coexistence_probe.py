"""Run in a fresh interpreter by test_coexistence.py: import liftbridge-nats beside
another module that registers Liftbridge's ``api.proto`` (in the order given), then use
both against a real server and print what each saw as one JSON line.

Usage: ``python _coexistence_probe.py ORDER BROKER NATS_URL STREAM [STUB_DIR]`` where
ORDER is ``gufo,sdk``, ``sdk,gufo``, ``stubs,sdk`` or ``sdk,stubs``; ``stubs`` are
modules generated with plain protoc (``api_pb2``, ``api_pb2_grpc``) in STUB_DIR.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from types import ModuleType


def import_in_order(order: list[str], stub_dir: str | None) -> dict[str, ModuleType]:
    # Imported by name, in the order asked: what they hold is known only at run time.
    modules: dict[str, ModuleType] = {}
    for name in order:
        if name == "sdk":
            modules["sdk"] = importlib.import_module("liftbridge_nats")
            importlib.import_module("liftbridge_nats._client")  # the gRPC side and its schema
        elif name == "gufo":
            modules["gufo"] = importlib.import_module("gufo.liftbridge.client")
            modules["gufo_types"] = importlib.import_module("gufo.liftbridge.types")
        elif name == "stubs":
            assert stub_dir is not None
            sys.path.insert(0, stub_dir)
            modules["pb"] = importlib.import_module("api_pb2")
            modules["pb_grpc"] = importlib.import_module("api_pb2_grpc")
        else:
            raise SystemExit(f"unknown module {name!r}")
    return modules


async def read_back(sdk: ModuleType, broker: str, stream: str) -> list[str]:
    async with (
        sdk.Client([broker]) as client,
        client.subscribe(
            stream,
            start_position=sdk.StartPosition.EARLIEST,
            stop_position=sdk.StopPosition.LATEST,
        ) as sub,
    ):
        return [msg.value.decode() async for msg in sub]


async def with_gufo(m: dict[str, ModuleType], broker: str, stream: str) -> dict[str, object]:
    types = m["gufo_types"]
    async with m["gufo"].LiftbridgeClient([broker]) as peer:
        await peer.publish(b"gufo", stream=stream, partition=0, ack_policy=types.AckPolicy.ALL)
        seen: list[str] = []
        async for msg in peer.subscribe(stream, start_position=types.StartPosition.EARLIEST):
            seen.append(msg.value.decode())
            if len(seen) == 2:
                break
    return {"peer_read": seen}


async def with_stubs(m: dict[str, ModuleType], broker: str, stream: str) -> dict[str, object]:
    import grpc.aio

    pb, pb_grpc = m["pb"], m["pb_grpc"]
    async with grpc.aio.insecure_channel(broker) as channel:
        stub = pb_grpc.APIStub(channel)
        resp = await stub.Publish(
            pb.PublishRequest(stream=stream, value=b"stubs", ackPolicy=pb.ALL), timeout=10
        )
        meta = await stub.FetchMetadata(pb.FetchMetadataRequest(streams=[stream]), timeout=10)
    return {
        "peer_offset": resp.ack.offset,
        "peer_streams": [s.name for s in meta.streamMetadata],
    }


async def main(
    order: list[str], broker: str, nats_url: str, stream: str, stubs: str | None
) -> None:
    import nats

    m = import_in_order(order, stubs)
    sdk = m["sdk"]
    nc = await nats.connect(nats_url)
    try:
        async with sdk.Client([broker]) as client, sdk.Publisher(nc) as pub:
            await client.create_stream(stream, stream)
            ack = await pub.publish(stream, b"sdk", ack_policy=sdk.AckPolicy.ALL)
    finally:
        await nc.close()
    out: dict[str, object] = {"sdk_offset": ack.offset}
    out |= await (with_gufo if "gufo" in order else with_stubs)(m, broker, stream)
    out["sdk_read"] = await read_back(sdk, broker, stream)
    print(json.dumps(out))


if __name__ == "__main__":
    order_arg, broker_arg, nats_arg, stream_arg, *rest = sys.argv[1:]
    stubs_arg = rest[0] if rest else None
    asyncio.run(main(order_arg.split(","), broker_arg, nats_arg, stream_arg, stubs_arg))
