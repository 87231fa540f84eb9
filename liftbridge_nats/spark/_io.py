"""Connections of the Spark source: the gRPC Client and nats-py, with their security.

Everything that talks to Liftbridge is async and is driven from Spark's synchronous
callbacks on the process's one background event loop (:func:`run`), where the
connections are kept across calls (:mod:`._connections`). Connection failures come out as :class:`~liftbridge_nats.NotConnectedError`
naming the option to check, and never carry a credential: URLs are shown with their
user-info masked (the SDK's ``redact``) and passwords, tokens and keys are never
formatted into a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Coroutine
from typing import Any, TypeVar

from liftbridge_nats import Client, LiftbridgeError, NotConnectedError
from liftbridge_nats._log import get_logger, redact
from liftbridge_nats.sync import _portal

from ._security import GrpcTls, NatsAuth

__all__ = ["CONNECTION_NAME", "connect_client", "connect_nats", "new_client", "run"]

_T = TypeVar("_T")
_log = get_logger("spark")

CONNECTION_NAME = "liftbridge-nats spark"
"""The name the source's NATS connections give the server (``/connz`` shows it)."""


def new_client(brokers: tuple[str, ...], rpc_timeout: float, tls: GrpcTls | None) -> Client:
    """An unconnected Client for ``brokers`` with the ``tls.*`` options."""
    return Client(brokers, timeout=rpc_timeout, tls=None if tls is None else tls.config())


def _broker_hint(tls: GrpcTls | None, exc: BaseException) -> str:
    if tls is not None:
        return "check the addresses and the options 'tls.ca', 'tls.cert' and 'tls.key'"
    if "tls" in str(exc).lower() or "ssl" in str(exc).lower():
        return "the brokers may require TLS: set the option 'tls.ca' (and 'tls.cert', 'tls.key')"
    return "check the addresses (the gRPC port, not NATS's) and that the brokers run"


async def connect_client(
    brokers: tuple[str, ...], rpc_timeout: float, tls: GrpcTls | None = None
) -> Client:
    """A connected Client; a failure to connect is reported against ``brokers``."""
    lb = new_client(brokers, rpc_timeout, tls)
    try:
        await lb.connect()
    except LiftbridgeError as exc:
        raise NotConnectedError(
            f"option 'brokers': no Liftbridge broker answered at {','.join(brokers)} ({exc}); "
            f"{_broker_hint(tls, exc)}."
        ) from None
    return lb


def _nats_failure(
    servers: tuple[str, ...], auth: NatsAuth, causes: list[BaseException]
) -> NotConnectedError:
    """The one error a failed NATS connection becomes, without any credential in it."""
    import nats.errors

    where = ",".join(redact(s) for s in servers)
    if any(
        isinstance(e, nats.errors.AuthorizationError) or "authoriz" in str(e).lower()
        for e in causes
    ):
        return NotConnectedError(
            f"option 'nats_url': NATS at {where} refused the credentials (authorization "
            "violation); check 'nats.user'/'nats.password', 'nats.token', "
            "'nats.nkeySeedFile' or 'nats.credsFile'."
        )
    if any(isinstance(e, ssl.SSLError) for e in causes):
        what = next(e for e in causes if isinstance(e, ssl.SSLError))
        return NotConnectedError(
            f"option 'nats_url': the TLS handshake with NATS at {where} failed "
            f"({getattr(what, 'reason', None) or type(what).__name__}); check 'nats.tls.ca' "
            "(the CA that signed the server), and 'nats.tls.cert' / 'nats.tls.key' if the "
            "server asks for a client certificate."
        )
    last = causes[-1]
    detail = redact(f"{type(last).__name__}: {last}")
    hint = "check the URL and that the server runs"
    if "tls" in detail.lower() and not auth.tls:
        hint = "the server may require TLS: set 'nats.tls' (or 'nats.tls.ca') or use tls://"
    return NotConnectedError(
        f"option 'nats_url': cannot connect to NATS at {where} ({detail}); {hint}."
    )


async def connect_nats(
    servers: tuple[str, ...],
    rpc_timeout: float,
    auth: NatsAuth | None = None,
    *,
    reconnect: bool = True,
) -> Any:
    """A nats-py connection; failing to connect is reported against ``nats_url``.

    ``reconnect=False`` gives up at the first refusal (a quick probe); a publishing
    task rides out a short NATS outage instead.
    """
    import nats.aio.client

    auth = auth or NatsAuth()
    errors: list[BaseException] = []

    async def remember(exc: Exception) -> None:
        # nats-py logs every failed attempt with a traceback by default; the outcome
        # is reported once, below or by the Publisher.
        errors.append(exc)
        _log.debug("NATS connection error: %s", type(exc).__name__)

    # nats-py annotates its timeouts as int but takes seconds as floats.
    options: dict[str, Any] = {
        "servers": list(servers),
        "connect_timeout": rpc_timeout,
        "allow_reconnect": reconnect,
        "max_reconnect_attempts": 3 if reconnect else 1,
        "reconnect_time_wait": 2.0 if reconnect else 0.1,
        "error_cb": remember,
        "name": CONNECTION_NAME,
    }
    try:
        options.update(auth.connect_options())
    except (OSError, ssl.SSLError) as exc:
        raise NotConnectedError(
            f"options 'nats.tls.*': cannot load the TLS files ({type(exc).__name__}: "
            f"{getattr(exc, 'strerror', None) or getattr(exc, 'reason', None) or 'unreadable'}); "
            "check that 'nats.tls.cert' and 'nats.tls.key' are a PEM certificate and its key."
        ) from None
    nc = nats.aio.client.Client()
    try:
        await nc.connect(**options)
        return nc
    except Exception as exc:
        # A refused connection leaves its socket open unless the client is closed.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 1.0)
        causes: list[BaseException] = [*errors, exc]
        cause = exc.__cause__ or exc.__context__
        while cause is not None and cause not in causes:
            causes.append(cause)
            cause = cause.__cause__ or cause.__context__
        raise _nats_failure(servers, auth, causes) from None


async def _await(coro: Coroutine[Any, Any, _T]) -> _T:
    return await coro


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on the process's background event loop and return its result.

    Every call of a process shares that loop, and with it the connections cached on
    it; the loop lives until the interpreter exits.
    """
    try:
        return _portal.call(_await, coro, async_api="liftbridge_nats.spark")
    except (_portal.PortalClosedError, _portal.EventLoopRunningError):
        # Never started (no loop to run on, or called from a loop): no "never awaited" warning.
        coro.close()
        raise
