"""Security settings of the ``liftbridge`` source: TLS for gRPC, credentials for NATS.

gRPC (reads, and the look-ups of a write): ``tls`` (true: TLS with the system's CA
roots), ``tls.ca``, ``tls.cert`` + ``tls.key`` (a client certificate for mutual TLS),
``tls.serverName``. NATS (writes): ``nats.user`` + ``nats.password``, ``nats.token``,
``nats.nkeySeedFile``, ``nats.credsFile`` (one of them), and ``nats.tls``,
``nats.tls.ca``, ``nats.tls.cert`` + ``nats.tls.key``. Files are paths that the driver
and every executor can read; they are checked on the driver.

Secrets (a password, a token) are kept in :class:`Secret`, whose ``repr`` and ``str``
never show the value, so settings printed in a log line, an error or a query plan
carry none. Spark itself redacts options whose names contain ``password`` or
``token`` (``spark.redaction.regex``), which is why the options are named so.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from liftbridge_nats import InvalidArgumentError

from ._values import Options, flag, readable_file

if TYPE_CHECKING:
    from liftbridge_nats import TLSConfig

__all__ = ["GrpcTls", "NatsAuth", "Secret", "parse_grpc_tls", "parse_nats_auth"]


class Secret:
    """A string that never shows itself: ``repr`` and ``str`` print ``***``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the one call that needs it."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (self._value,))


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """TLS for the gRPC channels to the brokers (file paths, read where used)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def config(self) -> TLSConfig:
        """The SDK's :class:`~liftbridge_nats.TLSConfig` for these settings."""
        from liftbridge_nats import TLSConfig

        return TLSConfig(
            ca_file=self.ca_file,
            cert_file=self.cert_file,
            key_file=self.key_file,
            server_name=self.server_name,
        )


def parse_grpc_tls(opts: Options) -> GrpcTls | None:
    """``tls``, ``tls.ca``, ``tls.cert``, ``tls.key``, ``tls.serverName``; None: plaintext."""
    enabled = flag(opts, "tls", None)
    ca, cert, key = (
        readable_file(opts, "tls.ca"),
        readable_file(opts, "tls.cert"),
        readable_file(opts, "tls.key"),
    )
    server_name = opts.get("tls.serverName")
    given = any(x is not None for x in (ca, cert, key, server_name))
    if enabled is False and given:
        raise InvalidArgumentError(
            "option 'tls' is false but 'tls.ca', 'tls.cert', 'tls.key' or 'tls.serverName' "
            "is set; drop 'tls' or the TLS settings."
        )
    if (cert is None) != (key is None):
        raise InvalidArgumentError(
            "options 'tls.cert' and 'tls.key' go together (a client certificate and its "
            "private key); set both or neither."
        )
    if not enabled and not given:
        return None
    return GrpcTls(ca_file=ca, cert_file=cert, key_file=key, server_name=server_name)


@dataclass(frozen=True, slots=True)
class NatsAuth:
    """How a write logs in to NATS: at most one credential kind, and TLS."""

    user: str | None = None
    password: Secret | None = None
    token: Secret | None = None
    nkey_seed_file: str | None = None
    creds_file: str | None = None
    tls: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def connect_options(self) -> dict[str, Any]:
        """Keyword arguments for nats-py's ``connect`` (builds the TLS context here)."""
        out: dict[str, Any] = {}
        if self.user is not None:
            out["user"] = self.user
        if self.password is not None:
            out["password"] = self.password.reveal()
        if self.token is not None:
            out["token"] = self.token.reveal()
        if self.nkey_seed_file is not None:
            out["nkeys_seed"] = self.nkey_seed_file
        if self.creds_file is not None:
            out["user_credentials"] = self.creds_file
        if self.tls:
            context = ssl.create_default_context(cafile=self.tls_ca)
            if self.tls_cert is not None and self.tls_key is not None:
                context.load_cert_chain(self.tls_cert, self.tls_key)
            out["tls"] = context
        return out


def parse_nats_auth(opts: Options, servers: tuple[str, ...]) -> NatsAuth:
    """The ``nats.*`` options; refuses two credential kinds at once."""
    user = opts.get("nats.user")
    password = opts.get("nats.password")
    token = opts.get("nats.token")
    nkey = readable_file(opts, "nats.nkeySeedFile")
    creds = readable_file(opts, "nats.credsFile")
    if (user is None) != (password is None):
        raise InvalidArgumentError(
            "options 'nats.user' and 'nats.password' go together; set both or neither."
        )
    kinds = [
        name
        for name, value in (
            ("nats.user/nats.password", user),
            ("nats.token", token),
            ("nats.nkeySeedFile", nkey),
            ("nats.credsFile", creds),
        )
        if value is not None
    ]
    if len(kinds) > 1:
        raise InvalidArgumentError(
            f"options {', '.join(kinds)} are all set; NATS takes one kind of credentials, keep one."
        )
    if kinds and any("@" in s.split("://", 1)[-1].split("/", 1)[0] for s in servers):
        raise InvalidArgumentError(
            f"option 'nats_url' carries credentials and option {kinds[0]} is set too; keep "
            "one of them."
        )
    enabled = flag(opts, "nats.tls", None)
    ca, cert, key = (
        readable_file(opts, "nats.tls.ca"),
        readable_file(opts, "nats.tls.cert"),
        readable_file(opts, "nats.tls.key"),
    )
    if (cert is None) != (key is None):
        raise InvalidArgumentError(
            "options 'nats.tls.cert' and 'nats.tls.key' go together; set both or neither."
        )
    given = any(x is not None for x in (ca, cert, key))
    if enabled is False and given:
        raise InvalidArgumentError(
            "option 'nats.tls' is false but 'nats.tls.ca', 'nats.tls.cert' or 'nats.tls.key' "
            "is set; drop 'nats.tls' or the TLS settings."
        )
    return NatsAuth(
        user=user,
        password=None if password is None else Secret(password),
        token=None if token is None else Secret(token),
        nkey_seed_file=nkey,
        creds_file=creds,
        tls=bool(enabled) or given,
        tls_ca=ca,
        tls_cert=cert,
        tls_key=key,
    )
