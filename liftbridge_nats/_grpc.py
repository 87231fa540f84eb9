"""gRPC plumbing shared by the client: TLS, one channel per broker, errors, backoff.

Nothing here knows about streams or partitions; :mod:`liftbridge_nats._client` decides
where a call goes, this module makes the call possible and turns its failures into the
SDK's error family.
"""

from __future__ import annotations

import asyncio
import os
import random
import ssl
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from ._errors import (
    BrokerUnavailableError,
    InvalidArgumentError,
    NoLeaderError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    PartitionPausedError,
    ReadonlyPartitionError,
    RpcError,
    RpcTimeoutError,
    StreamExistsError,
    for_grpc_status,
)
from ._proto import api_pb2_grpc
from ._read_pool import H2ReadTransport, ReadPool
from ._stream_reader import MAX_BYTES, MAX_MESSAGES

if TYPE_CHECKING:
    from ._proto.api_pb2_grpc import APIAsyncStub

__all__ = [
    "Backoff",
    "ChannelPool",
    "TLSConfig",
    "parse_brokers",
    "rpc_error",
]

# Liftbridge answers "not leader" with FAILED_PRECONDITION and a message naming the
# leadership; other FAILED_PRECONDITION answers (readonly, paused) are not retriable.
_NOT_LEADER_HINTS = (
    "not partition leader",
    "not cursor partition leader",
    "not leader",
    # FetchPartitionMetadata's words on a broker that no longer leads the partition.
    "should be sent to partition leader",
)
# gRPC's words for a failed TLS handshake (BoringSSL / TSI).
_TLS_HINTS = ("ssl", "tsi_", "handshake", "certificate", "tls")
# Raft has no leader yet (start-up, fail-over): the server says so with INTERNAL.
_NO_LEADER_HINTS = ("no known metadata leader", "no leader", "cursors partition")


@dataclass(frozen=True, slots=True)
class TLSConfig:
    """TLS settings for the gRPC channels, in the shape of an ``ssl`` context's inputs.

    ``ca_file`` verifies the brokers (the system roots when None); ``cert_file`` and
    ``key_file`` together give a client certificate for mutual TLS; ``server_name``
    overrides the name checked against the broker certificate (useful when brokers
    advertise a name the certificate does not carry). Each file may also be given as
    its PEM content (``bytes``).
    """

    ca_file: str | Path | bytes | None = None
    cert_file: str | Path | bytes | None = None
    key_file: str | Path | bytes | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        """Build the gRPC channel credentials (reads the files)."""
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidArgumentError("TLS needs both cert_file and key_file, or neither")

        def read(source: str | Path | bytes | None) -> bytes | None:
            if source is None or isinstance(source, bytes):
                return source
            try:
                return Path(source).read_bytes()
            except OSError as exc:
                raise InvalidArgumentError(
                    f"cannot read TLS file {source}: {exc.strerror}"
                ) from None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The same settings as an :class:`ssl.SSLContext` (the read path's sockets)."""
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidArgumentError("TLS needs both cert_file and key_file, or neither")
        try:
            if isinstance(self.ca_file, bytes):
                context = ssl.create_default_context(cadata=self.ca_file.decode("ascii"))
            else:
                context = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file is not None and self.key_file is not None:
                with _as_file(self.cert_file) as cert, _as_file(self.key_file) as key:
                    context.load_cert_chain(cert, key)
        except (OSError, ValueError, ssl.SSLError) as exc:
            raise InvalidArgumentError(f"cannot use the TLS files: {exc}") from None
        context.set_alpn_protocols(["h2"])
        return context


class _as_file:
    """A PEM given as content becomes a temporary file for the time of a load."""

    def __init__(self, source: str | Path | bytes) -> None:
        self._source = source
        self._path: str | None = None

    def __enter__(self) -> str:
        if not isinstance(self._source, bytes):
            return str(self._source)
        fd, self._path = tempfile.mkstemp(suffix=".pem")
        with os.fdopen(fd, "wb") as fh:
            fh.write(self._source)
        return self._path

    def __exit__(self, *exc_info: object) -> None:
        if self._path is not None:
            os.unlink(self._path)


def parse_brokers(brokers: str | Iterable[str]) -> tuple[str, ...]:
    """Normalise ``"h:p,h:p"`` or a list of ``"h:p"`` into a tuple of addresses."""
    if isinstance(brokers, str):
        items: list[object] = list(brokers.split(","))
    elif isinstance(brokers, Iterable):
        items = list(brokers)
    else:
        raise TypeError(f"brokers must be 'host:port' strings, got {type(brokers).__name__}")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"broker address must be a 'host:port' str, got {item!r}")
        addr = item.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError(f"broker address {addr!r} is not of the form host:port")
        out.append(addr)
    if not out:
        raise InvalidArgumentError("give at least one broker address (host:port)")
    return tuple(dict.fromkeys(out))


class ChannelPool:
    """One gRPC channel (and API stub) per broker address, opened on first use.

    Subscriptions read over the pool's :class:`~._read_pool.ReadPool` instead: one
    HTTP/2 connection per broker, read by the event loop (see :mod:`._h2` for why),
    reached through ``read_transport`` (see :mod:`._read_transport`).
    """

    def __init__(
        self,
        tls: TLSConfig | None = None,
        *,
        connect_timeout: float = 10.0,
        read_ahead_messages: int = MAX_MESSAGES,
        read_ahead_bytes: int = MAX_BYTES,
    ) -> None:
        self._tls = tls
        self._creds = tls.credentials() if tls is not None else None
        self._channels: dict[str, tuple[grpc.aio.Channel, APIAsyncStub]] = {}
        self.reads = ReadPool(
            tls,
            connect_timeout=connect_timeout,
            max_messages=read_ahead_messages,
            max_bytes=read_ahead_bytes,
        )
        self.read_transport = H2ReadTransport(self.reads)

    def _options(self) -> list[tuple[str, str | int]]:
        options: list[tuple[str, str | int]] = [
            # Brokers restart and move: do not wait long before redialling.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ]
        if self._tls is not None and self._tls.server_name:
            options.append(("grpc.ssl_target_name_override", self._tls.server_name))
        return options

    def stub(self, address: str) -> APIAsyncStub:
        """The API stub for ``address``; the channel connects lazily."""
        entry = self._channels.get(address)
        if entry is None:
            options = self._options()
            if self._creds is not None:
                channel = grpc.aio.secure_channel(address, self._creds, options=options)
            else:
                channel = grpc.aio.insecure_channel(address, options=options)
            entry = (channel, api_pb2_grpc.APIStub(channel))
            self._channels[address] = entry
        return entry[1]

    async def close(self) -> None:
        """Close every channel and connection (cancels the calls still running on them)."""
        await self.reads.close()
        channels = [channel for channel, _ in self._channels.values()]
        self._channels.clear()
        for channel in channels:
            await channel.close()


class Backoff:
    """Exponential backoff with jitter, bounded by a deadline on the loop clock."""

    def __init__(self, deadline: float, *, first: float = 0.05, cap: float = 1.0) -> None:
        self.deadline = deadline
        self._delay = first
        self._cap = cap

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    async def sleep(self) -> bool:
        """Wait before the next attempt; False when no time is left for one."""
        delay = self._delay * random.uniform(0.8, 1.2)
        if delay >= self.remaining():
            return False
        await asyncio.sleep(delay)
        self._delay = min(self._delay * 2, self._cap)
        return True


def rpc_error(exc: grpc.RpcError, what: str) -> RpcError:
    """Translate a gRPC failure of ``what`` (e.g. "create stream 'orders'") into our errors.

    The status picks the class (:func:`~liftbridge_nats.for_grpc_status`); the
    server's words refine it where one status covers several cases.
    """
    code = exc.code()
    detail = exc.details() or ""
    low = detail.lower()
    name = code.name if code is not None else "UNKNOWN"
    cls = for_grpc_status(name)
    msg = f"{what} failed: {detail or name}"
    if cls is StreamExistsError:
        msg = f"{what} failed: the stream already exists; pick another name or delete it first"
    elif cls is NoSuchStreamError:
        if "partition" in low:
            cls = NoSuchPartitionError
        msg = f"{what} failed: {detail or 'not found'}; check the name with fetch_metadata()"
    elif code == grpc.StatusCode.FAILED_PRECONDITION:
        if any(hint in low for hint in _NOT_LEADER_HINTS):
            cls = NotLeaderError
        elif "readonly" in low:
            cls = ReadonlyPartitionError
            msg = f"{what} failed: the partition is readonly; set_stream_readonly(..., readonly=False) reopens it"
        elif "paused" in low or "closed" in low:
            cls = PartitionPausedError
    elif cls is BrokerUnavailableError:
        if any(hint in low for hint in _TLS_HINTS):
            msg = (
                f"{what} failed: the TLS handshake with the broker failed ({detail}); check "
                "the CA file, the client certificate and key, and that the broker speaks TLS"
            )
        elif "socket closed" in low:
            msg = (
                f"{what} failed: the broker closed the connection ({detail}); if it "
                "requires TLS, pass tls=TLSConfig(...)"
            )
        else:
            msg = f"{what} failed: broker unavailable ({detail or 'no connection'}); is it running and reachable?"
    elif cls is RpcTimeoutError:
        msg = f"{what} timed out; retry or pass a larger timeout"
    elif code == grpc.StatusCode.INTERNAL and any(hint in low for hint in _NO_LEADER_HINTS):
        cls = NoLeaderError
        msg = f"{what} failed: {detail}; the cluster is electing a leader, retry shortly"
    return cls(msg, code=name)


def pick(addresses: Sequence[str], attempt: int) -> str:
    """Rotate through addresses so that retries reach another broker."""
    return addresses[attempt % len(addresses)]
