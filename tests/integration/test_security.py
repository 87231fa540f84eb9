"""Security against real servers: NATS with TLS, user/password, token and NKey auth;
Liftbridge's gRPC API with TLS and client certificates.

Every setup is tried with the right and with wrong credentials. Wrong credentials must
give an error that names the problem, and no secret (password, token, NKey seed, private
key) may appear in an exception message or in a log line of the SDK or of nats-py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import nats.aio.client
import nats.errors
import nkeys
import pytest
from _publisher_helpers import acked, read_all, socket_writes

from liftbridge_nats import (
    AckPolicy,
    Client,
    LiftbridgeError,
    StartPosition,
    StopPosition,
    TLSConfig,
)
from liftbridge_nats.testing import LocalCluster
from liftbridge_nats.testing._certs import TestCertificates, generate_certificates
from liftbridge_nats.testing._jwt import (
    OperatorHub,
    new_keypair,
    seed_lines,
    write_creds,
)

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.processes_only(
        "configures nats-server (TLS, users, NKeys, tokens, operator mode) and Liftbridge "
        "TLS with files on the host; ContainerCluster takes no nats_config or certificates"
    ),
]

PASSWORD = "pw-" + secrets.token_hex(12)
TOKEN = "tok-" + secrets.token_hex(12)
LIFTBRIDGE_USER = "liftbridge"
APP_USER = "app"
APP_PASSWORD = "app-" + secrets.token_hex(12)
CONNECT: dict[str, Any] = {
    "connect_timeout": 3,
    "allow_reconnect": False,
    # nats-py retries a failing server forever when this is 0 (its "no limit").
    "max_reconnect_attempts": 1,
    "reconnect_time_wait": 0.1,
}


def _exception_text(exc: BaseException) -> str:
    """Message, repr and every chained cause of ``exc``."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), *map(str, current.args)]
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


def _assert_no_secret(text: str, *secrets_: str) -> None:
    for secret in secrets_:
        assert secret not in text, "a secret leaked into an error message or a log line"


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Capture every log record of every logger at DEBUG level."""
    with caplog.at_level(logging.DEBUG):
        yield caplog


async def _roundtrip(nc: Any, brokers: list[str], name: str, tls: TLSConfig | None = None) -> None:
    """Create a stream, publish one ALL-acked message over NATS, read it back over gRPC."""
    async with Client(brokers, tls=tls, timeout=10) as client:
        await client.create_stream(name, name)
    await _roundtrip_existing(nc, brokers, name, tls)


async def _roundtrip_existing(
    nc: Any, brokers: list[str], name: str, tls: TLSConfig | None = None, *, retry: bool = False
) -> None:
    """Publish one ALL-acked message to an existing stream and read it back."""
    from liftbridge_nats import Publisher

    async with Publisher(nc, ack_timeout=10, retry=retry) as pub:
        ack = await pub.publish(name, b"secure hello", ack_policy=AckPolicy.ALL)
    assert ack is not None and ack.offset == 0 and ack.stream == name
    async with Client(brokers, tls=tls, timeout=10) as client:
        got = [
            m.value
            async for m in client.subscribe(
                name, start_position=StartPosition.EARLIEST, stop_position=StopPosition.LATEST
            )
        ]
    assert got == [b"secure hello"]


async def _refused(url: str, **options: Any) -> BaseException:
    """Connect a nats-py client that must be refused; return the exception it raised.

    The client object is made first and closed after the failure: nats-py leaves the
    socket of a refused connection open otherwise (an unclosed-transport warning). Its
    close() can then hang in the transport's wait_closed() after a failed TLS handshake
    (nats-py 2.16), once the socket is already closed, hence the bound.
    """
    nc = nats.aio.client.Client()
    try:
        await nc.connect(url, **CONNECT, **options)
    except Exception as exc:
        return exc
    finally:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(nc.close(), 1.0)
    raise AssertionError("the connection was accepted with wrong credentials")


# ------------------------------------------------------------------ certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def rogue_certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    """A second, unrelated CA: its client certificate must be refused."""
    return generate_certificates(tmp_path_factory.mktemp("rogue-pki"))


def _pem_secrets(*files: Path) -> list[str]:
    """The base64 body lines of private keys: none may ever be printed."""
    out = []
    for path in files:
        out += [line for line in path.read_text().splitlines() if line and not line.startswith("-")]
    return out


# ------------------------------------------------------------------ NATS with TLS


@pytest.fixture(scope="module")
def tls_nats_cluster(certs: TestCertificates) -> Iterator[LocalCluster]:
    """NATS requiring TLS and a verified client certificate; Liftbridge connects with one."""
    nats_tls = "\n".join(
        [
            "tls {",
            f'  cert_file: "{certs.server_cert}"',
            f'  key_file: "{certs.server_key}"',
            f'  ca_file: "{certs.ca_cert}"',
            "  verify: true",
            "  timeout: 3",
            "}",
        ]
    )
    config = {
        "nats.tls.cert": str(certs.client_cert),
        "nats.tls.key": str(certs.client_key),
        "nats.tls.ca": str(certs.ca_cert),
    }
    with LocalCluster(1, nats_config=nats_tls, liftbridge_config=config) as cluster:
        yield cluster


async def test_nats_tls_with_client_certificate_publishes(
    tls_nats_cluster: LocalCluster, certs: TestCertificates, unique_name: Any
) -> None:
    nc = await nats.connect(tls_nats_cluster.nats_url, tls=certs.client_context(), **CONNECT)
    try:
        await _roundtrip(nc, tls_nats_cluster.brokers, unique_name("tls"))
    finally:
        await nc.close()


async def test_a_burst_over_tls_reaches_the_socket_while_it_is_made(
    tls_nats_cluster: LocalCluster, certs: TestCertificates, unique_name: Any
) -> None:
    """2,000 publish() calls of 1 KiB, made without yielding and then gathered: the fast
    path hands nats-py's buffer to the TLS transport during the calls, and every message
    is stored once, in call order."""
    from liftbridge_nats import Publisher

    name = unique_name("tlsburst")
    values = [b"%04d" % i + b"x" * 1020 for i in range(2_000)]
    nc = await nats.connect(tls_nats_cluster.nats_url, tls=certs.client_context(), **CONNECT)
    try:
        async with Client(tls_nats_cluster.brokers, timeout=10) as client:
            await client.create_stream(name, name)
            async with Publisher(nc, ack_timeout=30) as pub:
                assert pub.fast_path, pub.fast_path.reason
                with socket_writes(nc) as handed:
                    calls = [pub.publish(name, v, ack_policy=AckPolicy.ALL) for v in values]
                acks = acked(await asyncio.gather(*calls))
            stored = await read_all(client, name)
    finally:
        await nc.close()
    assert handed, "the burst sent nothing to the TLS socket before the event loop ran"
    assert [a.offset for a in acks] == list(range(len(values)))
    assert [m.value for m in stored] == values


@pytest.mark.parametrize(
    "case", ["no-tls", "no-client-cert", "untrusted-client-cert", "untrusted-server"]
)
async def test_nats_tls_wrong_credentials_are_refused(
    tls_nats_cluster: LocalCluster,
    certs: TestCertificates,
    rogue_certs: TestCertificates,
    all_logs: pytest.LogCaptureFixture,
    case: str,
) -> None:
    options: dict[str, Any] = {}
    if case == "no-client-cert":
        options["tls"] = certs.client_context(with_client_cert=False)
    elif case == "untrusted-client-cert":
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        context.load_cert_chain(str(rogue_certs.client_cert), str(rogue_certs.client_key))
        options["tls"] = context
    elif case == "untrusted-server":
        options["tls"] = rogue_certs.client_context()
    exc = await _refused(tls_nats_cluster.nats_url, **options)
    text = _exception_text(exc)
    # nats-py reports a refused TLS connection as "no servers available" with the
    # cause (SSL error, reset, or the server's TLS-required refusal) chained.
    assert isinstance(exc, nats.errors.Error | OSError | ssl.SSLError), text
    _assert_no_secret(
        text + all_logs.text,
        *_pem_secrets(certs.client_key, rogue_certs.client_key, certs.server_key),
    )


# ------------------------------------------------------------------ NATS user/password + NKey


@pytest.fixture(scope="module")
def app_nkey() -> nkeys.KeyPair:
    return nkeys.from_seed(_new_user_seed())


def _new_user_seed() -> bytes:
    # An NKey user seed: prefix "SU"; nkeys encodes 32 random bytes with its CRC.
    return nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def auth_nats_cluster(app_nkey: nkeys.KeyPair) -> Iterator[LocalCluster]:
    """NATS with a users list: Liftbridge and the app by password, another app by NKey."""
    public = app_nkey.public_key.decode()
    users = "\n".join(
        [
            "authorization {",
            "  users = [",
            f'    {{user: "{LIFTBRIDGE_USER}", password: "{PASSWORD}"}}',
            f'    {{user: "{APP_USER}", password: "{APP_PASSWORD}"}}',
            f'    {{nkey: "{public}"}}',
            "  ]",
            "}",
        ]
    )
    config = {"nats.user": LIFTBRIDGE_USER, "nats.password": PASSWORD}
    with LocalCluster(1, nats_config=users, liftbridge_config=config) as cluster:
        yield cluster


async def test_nats_user_password_publishes(
    auth_nats_cluster: LocalCluster, unique_name: Any, all_logs: pytest.LogCaptureFixture
) -> None:
    nc = await nats.connect(
        auth_nats_cluster.nats_url, user=APP_USER, password=APP_PASSWORD, **CONNECT
    )
    try:
        await _roundtrip(nc, auth_nats_cluster.brokers, unique_name("userpass"))
    finally:
        await nc.close()
    _assert_no_secret(all_logs.text, APP_PASSWORD, PASSWORD)


@pytest.mark.parametrize("how", ["options", "url"])
async def test_nats_wrong_password_is_an_authorization_error(
    auth_nats_cluster: LocalCluster, all_logs: pytest.LogCaptureFixture, how: str
) -> None:
    wrong = "wrong-" + secrets.token_hex(8)
    if how == "options":
        exc = await _refused(auth_nats_cluster.nats_url, user=APP_USER, password=wrong)
    else:
        url = auth_nats_cluster.nats_url.replace("nats://", f"nats://{APP_USER}:{wrong}@")
        exc = await _refused(url)
    text = _exception_text(exc)
    assert "authorization" in text.lower(), text
    _assert_no_secret(text + all_logs.text, wrong, APP_PASSWORD, PASSWORD)


async def test_nats_nkey_seed_file_publishes(
    auth_nats_cluster: LocalCluster,
    app_nkey: nkeys.KeyPair,
    tmp_path: Path,
    unique_name: Any,
    all_logs: pytest.LogCaptureFixture,
) -> None:
    seed_file = tmp_path / "app.nk"
    seed = app_nkey.seed.decode()
    seed_file.write_text(seed + "\n")
    nc = await nats.connect(auth_nats_cluster.nats_url, nkeys_seed=str(seed_file), **CONNECT)
    try:
        await _roundtrip(nc, auth_nats_cluster.brokers, unique_name("nkey"))
    finally:
        await nc.close()
    _assert_no_secret(all_logs.text, seed)


async def test_nats_unknown_nkey_is_an_authorization_error(
    auth_nats_cluster: LocalCluster, all_logs: pytest.LogCaptureFixture
) -> None:
    seed = _new_user_seed().decode()
    exc = await _refused(auth_nats_cluster.nats_url, nkeys_seed_str=seed)
    text = _exception_text(exc)
    assert "authorization" in text.lower(), text
    _assert_no_secret(text + all_logs.text, seed)


# ------------------------------------------------------------------ NATS token


@pytest.fixture(scope="module")
def token_nats_cluster() -> Iterator[LocalCluster]:
    """NATS with token auth. Liftbridge v1.9.0 has no token key, but nats.go takes a
    token from the user-info of the server URL: the harness puts it there."""
    conf = "\n".join(["authorization {", f'  token: "{TOKEN}"', "}"])
    with LocalCluster(1, nats_config=conf, nats_url_userinfo=TOKEN) as cluster:
        yield cluster


async def test_nats_token_publishes(
    token_nats_cluster: LocalCluster, unique_name: Any, all_logs: pytest.LogCaptureFixture
) -> None:
    nc = await nats.connect(token_nats_cluster.nats_url, token=TOKEN, **CONNECT)
    try:
        await _roundtrip(nc, token_nats_cluster.brokers, unique_name("token"))
    finally:
        await nc.close()
    _assert_no_secret(all_logs.text, TOKEN)


@pytest.mark.parametrize("how", ["wrong", "missing"])
async def test_nats_wrong_token_is_an_authorization_error(
    token_nats_cluster: LocalCluster, all_logs: pytest.LogCaptureFixture, how: str
) -> None:
    wrong = "tok-" + secrets.token_hex(12)
    options: dict[str, Any] = {}
    if how == "wrong":
        options["token"] = wrong
    exc = await _refused(token_nats_cluster.nats_url, **options)
    text = _exception_text(exc)
    assert "authorization" in text.lower(), text
    _assert_no_secret(text + all_logs.text, wrong, TOKEN)


# ------------------------------------------------------------------ Liftbridge gRPC with TLS


def test_certificates_verify_with_openssl_and_python(certs: TestCertificates) -> None:
    server = certs.server_context()
    client = certs.client_context()
    assert server.verify_mode == ssl.CERT_REQUIRED
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    for key in (certs.ca_key, certs.server_key, certs.client_key):
        assert key.stat().st_mode & 0o077 == 0, f"{key} is readable by others"


async def _handshake(certs: TestCertificates, client_ctx: ssl.SSLContext) -> None:
    """A TLS handshake between contexts made from the generated files, on loopback."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=certs.server_context())
    try:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1"
        )
        try:
            assert await reader.read() == b"ok"
        finally:
            writer.close()
            await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()


async def test_generated_certificates_complete_a_mutual_tls_handshake(
    certs: TestCertificates,
) -> None:
    await _handshake(certs, certs.client_context())


@pytest.fixture(scope="module")
def tls_grpc_cluster(certs: TestCertificates) -> Iterator[LocalCluster]:
    config = {
        "tls.cert": str(certs.server_cert),
        "tls.key": str(certs.server_key),
        "tls.client.auth.enabled": True,
        "tls.client.auth.ca": str(certs.ca_cert),
    }
    with LocalCluster(1, liftbridge_config=config, grpc_tls=certs) as cluster:
        yield cluster


def _tls(certs: TestCertificates, *, client_cert: bool = True) -> TLSConfig:
    return TLSConfig(
        ca_file=certs.ca_cert,
        cert_file=certs.client_cert if client_cert else None,
        key_file=certs.client_key if client_cert else None,
    )


async def test_grpc_tls_with_client_certificate(
    tls_grpc_cluster: LocalCluster, certs: TestCertificates, unique_name: Any
) -> None:
    nc = await nats.connect(tls_grpc_cluster.nats_url, **CONNECT)
    try:
        await _roundtrip(nc, tls_grpc_cluster.brokers, unique_name("grpc-tls"), _tls(certs))
    finally:
        await nc.close()


@pytest.mark.parametrize(
    "case", ["plaintext", "no-client-cert", "untrusted-client", "untrusted-server"]
)
async def test_grpc_tls_wrong_credentials_raise_a_liftbridge_error(
    tls_grpc_cluster: LocalCluster,
    certs: TestCertificates,
    rogue_certs: TestCertificates,
    all_logs: pytest.LogCaptureFixture,
    case: str,
) -> None:
    tls: TLSConfig | None
    if case == "plaintext":
        tls = None
    elif case == "no-client-cert":
        tls = _tls(certs, client_cert=False)
    elif case == "untrusted-client":
        tls = TLSConfig(
            ca_file=certs.ca_cert,
            cert_file=rogue_certs.client_cert,
            key_file=rogue_certs.client_key,
        )
    else:
        tls = _tls(rogue_certs)
    with pytest.raises(LiftbridgeError) as info:
        async with Client(tls_grpc_cluster.brokers, tls=tls, timeout=3) as client:
            await client.fetch_metadata()
    text = _exception_text(info.value)
    # The message names the problem: TLS (handshake, CA, client certificate).
    assert "tls" in str(info.value).lower(), text
    _assert_no_secret(
        text + all_logs.text,
        *_pem_secrets(certs.client_key, rogue_certs.client_key, certs.server_key),
    )


# ------------------------------------------------------------------ SDK-owned NATS connections
# The Publisher takes the application's own nats-py client, so connecting (and its auth
# errors) stay with the application: the tests above show what nats-py raises, and that
# it names the problem without the secret. Where the SDK opens the NATS connection itself
# (the CLI, the Spark data source), a refused login must come out as a LiftbridgeError
# naming the problem, and the URL's credentials must not appear in it.


def _url_with(cluster: LocalCluster, userinfo: str) -> str:
    return cluster.nats_url.replace("nats://", f"nats://{userinfo}@")


def test_cli_wrong_nats_password_is_a_clear_error_without_the_secret(
    auth_nats_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from liftbridge_nats.cli import main

    wrong = "wrong-" + secrets.token_hex(8)
    code = main(
        [
            "publish",
            "--nats",
            _url_with(auth_nats_cluster, f"{APP_USER}:{wrong}"),
            "--brokers",
            ",".join(auth_nats_cluster.brokers),
            "--timeout",
            "3",
            "no-such-stream-cli",
            "value",
        ]
    )
    out, err = capsys.readouterr()
    assert code != 0
    assert "authoriz" in (out + err).lower(), out + err
    _assert_no_secret(out + err, wrong)


async def test_spark_nats_connection_wrong_password_is_a_liftbridge_error(
    auth_nats_cluster: LocalCluster, all_logs: pytest.LogCaptureFixture
) -> None:
    from liftbridge_nats.spark._io import connect_nats

    wrong = "wrong-" + secrets.token_hex(8)
    url = _url_with(auth_nats_cluster, f"{APP_USER}:{wrong}")
    with pytest.raises(LiftbridgeError) as info:
        nc = await connect_nats((url,), 3.0, reconnect=False)
        await nc.close()
    text = _exception_text(info.value)
    assert "authoriz" in text.lower(), text
    _assert_no_secret(text + all_logs.text, wrong)


# ------------------------------------------------------------------ NATS creds file (JWT)
# A creds file is accepted only in operator (JWT) mode; Liftbridge stays on a leaf node
# of an operator-mode hub, where the application connects (see testing._jwt).


async def test_nats_creds_file_publishes_through_an_operator_mode_server(
    jwt_hub_cluster: tuple[LocalCluster, OperatorHub],
    tmp_path: Path,
    unique_name: Any,
    all_logs: pytest.LogCaptureFixture,
) -> None:
    cluster, hub = jwt_hub_cluster
    creds = write_creds(tmp_path / "app.creds", hub.account, "app")
    nc = await nats.connect(hub.url, user_credentials=str(creds), **CONNECT)
    try:
        # The stream's subscription reaches the hub through the leaf connection a
        # moment after the stream exists; until then NATS answers "no responders",
        # which retry=True waits out by sending again.
        name = unique_name("creds")
        async with Client(cluster.brokers) as client:
            await client.create_stream(name, name)
        await _roundtrip_existing(nc, cluster.brokers, name, retry=True)
    finally:
        await nc.close()
    _assert_no_secret(all_logs.text, *seed_lines(creds))


async def test_nats_creds_file_with_a_foreign_seed_is_refused(
    jwt_hub_cluster: tuple[LocalCluster, OperatorHub],
    tmp_path: Path,
    all_logs: pytest.LogCaptureFixture,
) -> None:
    _, hub = jwt_hub_cluster
    stranger = new_keypair(nkeys.PREFIX_BYTE_USER)
    creds = write_creds(tmp_path / "bad.creds", hub.account, "app", seed_of=stranger)
    exc = await _refused(hub.url, user_credentials=str(creds))
    text = _exception_text(exc)
    assert "authorization" in text.lower(), text
    _assert_no_secret(text + all_logs.text, stranger.seed.decode())


async def test_nats_creds_file_of_an_unknown_account_is_refused(
    jwt_hub_cluster: tuple[LocalCluster, OperatorHub],
    tmp_path: Path,
    all_logs: pytest.LogCaptureFixture,
) -> None:
    _, hub = jwt_hub_cluster
    other_account = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    creds = write_creds(tmp_path / "other.creds", other_account, "app")
    exc = await _refused(hub.url, user_credentials=str(creds))
    text = _exception_text(exc)
    assert "authorization" in text.lower(), text
    _assert_no_secret(text + all_logs.text, *seed_lines(creds))
