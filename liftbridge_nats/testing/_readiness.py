"""Is a Liftbridge test cluster usable yet? Checked from outside, as a client sees it.

A cluster is ready when, for every running node:

1. nats-server's monitoring endpoint lists the node's ``raft`` and ``streams`` NATS
   connections (Liftbridge names them ``LIFT.<namespace>.<id>.<purpose>``), so
   publishes and cluster traffic reach it, including after a NATS restart;
2. the node serves gRPC and knows the internal ``__cursors`` stream, which the metadata
   leader creates as soon as it is elected (FetchPartitionMetadata answers NOT_FOUND
   before that). This call never surveys peers, and a node subscribes to peers'
   broker surveys before it serves gRPC, so step 3 cannot cache a short broker list;
3. FetchMetadata lists every running node at its address, and the ``__cursors``
   partitions have a live leader (skipped when cursors are disabled);
4. the metadata leader is reachable from the node: pausing a stream that does not
   exist comes back NOT_FOUND from the leader (a follower forwards the request over
   NATS), and nothing is written. Right after start-up, and right after the leader
   dies, FetchMetadata alone answers although CreateStream would fail with "no known
   metadata leader".

All calls are blocking; run :func:`probe` in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from liftbridge_nats import ServerStartError

CURSORS_STREAM = "__cursors"
# A broker surveys its peers for up to 3 s when one of them does not answer.
RPC_TIMEOUT = 5.0
_NO_SUCH_STREAM = "liftbridge-nats-readiness-probe-no-such-stream"
_PROBE_INTERVAL = 0.2


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """PEM bytes for probing brokers that serve gRPC over TLS."""

    root_certificates: bytes
    private_key: bytes | None = None
    certificate_chain: bytes | None = None


@dataclass(frozen=True, slots=True)
class ReadinessTarget:
    """What to probe: running nodes (id -> "host:port"), namespace, NATS monitor URL."""

    brokers: dict[str, str]
    namespace: str
    monitor_url: str
    cursors_enabled: bool
    tls: GrpcTls | None = None
    rpc_timeout: float = RPC_TIMEOUT


def _channel(target: ReadinessTarget, address: str) -> Any:
    import grpc

    if target.tls is None:
        return grpc.insecure_channel(address)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=target.tls.root_certificates,
        private_key=target.tls.private_key,
        certificate_chain=target.tls.certificate_chain,
    )
    return grpc.secure_channel(address, credentials)


async def wait_ready(
    step: Callable[[float], str | None], *, limit: float, logs: Callable[[], str], heading: str
) -> None:
    """Repeat ``step`` (in a worker thread) until it returns None; give up after ``limit`` s.

    ``step(rpc_timeout)`` returns why the cluster is not ready yet, or raises
    :class:`~liftbridge_nats.ServerStartError` for what waiting cannot fix (a
    server that exited). Each step gets at most the time left, so a hung node cannot
    stretch the wait. The error after ``limit`` carries the last reason and ``logs()``.
    """
    deadline = time.monotonic() + limit
    while True:
        left = min(RPC_TIMEOUT, max(0.5, deadline - time.monotonic()))
        reason = await asyncio.to_thread(step, left)
        if reason is None:
            return
        if time.monotonic() >= deadline:
            raise ServerStartError(
                f"the Liftbridge cluster was not ready within {limit:.0f} s "
                f"(last check: {reason}). {heading}:\n{logs()}"
            )
        await asyncio.sleep(_PROBE_INTERVAL)


def probe(target: ReadinessTarget) -> str | None:
    """Return why the cluster is not ready yet, or None when it is."""
    reason = _nats_connections(target)
    if reason is None:
        reason = _serving(target)
    if reason is None:
        reason = _metadata(target)
    if reason is None:
        reason = _leader_reachable(target)
    return reason


def _rpc_error(exc: Exception) -> str:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{code()} {details()}"
    return str(exc)


def _nats_connections(target: ReadinessTarget) -> str | None:
    url = f"{target.monitor_url}/connz?limit=100000"
    try:
        with urllib.request.urlopen(url, timeout=target.rpc_timeout) as resp:
            connz = json.load(resp)
    except (OSError, ValueError) as exc:
        return f"nats-server monitoring endpoint did not answer: {exc}"
    names = {str(c.get("name", "")) for c in connz.get("connections") or []}
    for node_id in target.brokers:
        prefix = f"LIFT.{target.namespace}.{node_id}."
        for purpose in ("raft", "streams"):
            if prefix + purpose not in names:
                return f"{node_id} has no {purpose!r} NATS connection yet"
    return None


def _serving(target: ReadinessTarget) -> str | None:
    import grpc

    from liftbridge_nats._proto import api_pb2, api_pb2_grpc

    for node_id, address in target.brokers.items():
        with _channel(target, address) as channel:
            stub = api_pb2_grpc.APIStub(channel)
            try:
                stub.FetchPartitionMetadata(
                    api_pb2.FetchPartitionMetadataRequest(stream=CURSORS_STREAM),
                    timeout=target.rpc_timeout,
                )
            except grpc.RpcError as exc:
                code = exc.code() if callable(getattr(exc, "code", None)) else None
                if code == grpc.StatusCode.FAILED_PRECONDITION:
                    continue  # known, and led by another node
                if code == grpc.StatusCode.NOT_FOUND and not target.cursors_enabled:
                    continue  # serving; the probe stream checks for a leader
                if code == grpc.StatusCode.NOT_FOUND:
                    return f"{node_id}: no metadata leader yet ({CURSORS_STREAM} unknown)"
                return f"{node_id}: not serving yet ({_rpc_error(exc)})"
    return None


def _metadata(target: ReadinessTarget) -> str | None:
    import grpc

    from liftbridge_nats._proto import api_pb2, api_pb2_grpc

    for node_id, address in target.brokers.items():
        with _channel(target, address) as channel:
            stub = api_pb2_grpc.APIStub(channel)
            # No gRPC deadline on purpose: while a raft peer is down, a broker whose
            # broker cache expired surveys its peers until the caller's deadline
            # (3 s without one), so a deadline makes the call fail instead of answer.
            call = stub.FetchMetadata.future(api_pb2.FetchMetadataRequest(streams=[CURSORS_STREAM]))
            try:
                resp = call.result(timeout=target.rpc_timeout)
            except grpc.FutureTimeoutError:
                call.cancel()
                return f"{node_id}: FetchMetadata did not answer in {target.rpc_timeout:.1f} s"
            except grpc.RpcError as exc:
                return f"{node_id}: FetchMetadata failed: {_rpc_error(exc)}"
        seen = {b.id: f"{b.host}:{b.port}" for b in resp.brokers}
        missing = sorted(k for k, addr in target.brokers.items() if seen.get(k) != addr)
        if missing:
            return f"{node_id}: FetchMetadata does not list {missing} yet (lists {seen})"
        if not target.cursors_enabled:
            continue
        meta = [s for s in resp.streamMetadata if s.name == CURSORS_STREAM]
        if not meta or meta[0].error != 0 or not meta[0].partitions:
            return f"{node_id}: no metadata leader yet ({CURSORS_STREAM} not created)"
        for pid, partition in meta[0].partitions.items():
            if partition.leader not in target.brokers:
                return (
                    f"{node_id}: {CURSORS_STREAM} partition {pid} has no live leader "
                    f"yet (leader={partition.leader!r})"
                )
    return None


def _leader_reachable(target: ReadinessTarget) -> str | None:
    import grpc

    from liftbridge_nats._proto import api_pb2, api_pb2_grpc

    # Pausing a stream that does not exist is answered by the metadata leader (a
    # follower forwards it over NATS) with NOT_FOUND, before anything is written to
    # the raft log: proof that a live leader is reachable, with no side effect.
    for node_id, address in target.brokers.items():
        with _channel(target, address) as channel:
            stub = api_pb2_grpc.APIStub(channel)
            try:
                stub.PauseStream(
                    api_pb2.PauseStreamRequest(name=_NO_SUCH_STREAM, partitions=[0]),
                    timeout=target.rpc_timeout,
                )
            except grpc.RpcError as exc:
                code = exc.code() if callable(getattr(exc, "code", None)) else None
                if code == grpc.StatusCode.NOT_FOUND:
                    continue
                return f"{node_id}: metadata leader not reachable yet ({_rpc_error(exc)})"
            return f"{node_id}: pausing {_NO_SUCH_STREAM!r} unexpectedly succeeded"
    return None
