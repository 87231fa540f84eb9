"""TLS: the client talks to a broker that requires mutual TLS.

The harness clusters speak plaintext gRPC, so this test starts one extra Liftbridge
node of its own (TLS with client authentication, its own Raft namespace) on the
session cluster's NATS server, and stops it at the end.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from liftbridge_nats import (
    BrokerUnavailableError,
    Client,
    LiftbridgeError,
    StartPosition,
    StopPosition,
    TLSConfig,
)
from liftbridge_nats.testing import ensure_liftbridge
from liftbridge_nats.testing._certs import TestCertificates, generate_certificates


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def tls_broker(
    liftbridge_cluster: Any, tmp_path: Path
) -> AsyncIterator[tuple[str, TestCertificates]]:
    certs = generate_certificates(tmp_path / "certs")
    port = free_port()
    config = tmp_path / "liftbridge.yaml"
    config.write_text(
        f"""listen: "127.0.0.1:{port}"
host: "127.0.0.1"
port: {port}
data:
  dir: "{tmp_path / "data"}"
nats:
  servers: ["{liftbridge_cluster.nats_url}"]
clustering:
  server:
    id: "tls0"
  namespace: "tls-{uuid.uuid4().hex[:8]}"
  raft:
    bootstrap:
      seed: true
cursors:
  stream:
    partitions: 1
tls:
  key: "{certs.server_key}"
  cert: "{certs.server_cert}"
  client:
    auth:
      enabled: true
      ca: "{certs.ca_cert}"
"""
    )
    log = (tmp_path / "tls0.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        str(ensure_liftbridge()), "--config", str(config), stdout=log, stderr=log
    )
    address = f"127.0.0.1:{port}"
    try:
        yield address, certs
    finally:
        proc.kill()
        await proc.wait()
        log.close()


async def connect_when_ready(address: str, tls: TLSConfig) -> Client:
    """A connected client once the node has a metadata leader (creating a stream works)."""
    deadline = time.monotonic() + 30
    while True:
        # A generous per-call deadline: the test's own calls use this client, and a busy
        # machine (three suites side by side in the release checks) slows stream creation.
        client = Client([address], tls=tls, timeout=10)
        try:
            await client.connect()
            await client.create_stream("ready", "ready")
            return client
        except LiftbridgeError:
            await client.close()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


@pytest.mark.processes_only(
    "runs its own TLS Liftbridge process with certificate files from the host"
)
async def test_mutual_tls(tls_broker: tuple[str, TestCertificates]) -> None:
    address, certs = tls_broker
    tls = TLSConfig(ca_file=certs.ca_cert, cert_file=certs.client_cert, key_file=certs.client_key)
    client = await connect_when_ready(address, tls)
    async with client:
        await client.create_stream("secure", "secure")
        ack = await client.publish_to_stream("secure", b"over tls")
        assert ack is not None and ack.offset == 0
        sub = client.subscribe(
            "secure", start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
        )
        async with sub:
            assert [m.value async for m in sub] == [b"over tls"]
        await client.set_cursor("c", "secure", 0, 0)
        assert await client.fetch_cursor("c", "secure", 0) == 0

    # Without a client certificate, or without TLS at all, the broker refuses.
    for bad in (TLSConfig(ca_file=certs.ca_cert), None):
        with pytest.raises(BrokerUnavailableError, match="TLS"):
            async with Client([address], tls=bad, timeout=2):
                pass


def test_tls_config_takes_pem_bytes() -> None:
    # PEM content works as well as paths (no file is read then).
    creds = TLSConfig(ca_file=b"-----BEGIN CERTIFICATE-----\n").credentials()
    assert creds is not None


def test_tls_config_needs_cert_and_key_together(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cert_file and key_file"):
        TLSConfig(cert_file=tmp_path / "c.pem").credentials()
