"""The Spark source against a secured cluster: gRPC with mutual TLS, NATS with TLS and
user/password or NKey logins, and NATS with a token.

Each case runs with the right credentials (the read or write goes through) and with
wrong ones (a clear error naming what to check). No secret may appear in an error, in
a log line of the SDK or in a query plan.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nkeys
import pytest

from liftbridge_nats import AckPolicy, Client, StartPosition, StopPosition, TLSConfig
from liftbridge_nats.testing import LocalCluster
from liftbridge_nats.testing._certs import TestCertificates, generate_certificates

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

LB_PASSWORD = "lb-" + secrets.token_hex(12)
APP_PASSWORD = "app-" + secrets.token_hex(12)
TOKEN = "tok-" + secrets.token_hex(12)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    return generate_certificates(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> TestCertificates:
    """An unrelated CA and its client certificate: both must be refused."""
    return generate_certificates(tmp_path_factory.mktemp("rogue"))


@pytest.fixture(scope="module")
def nkey_seed_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    seed = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    path = tmp_path_factory.mktemp("nkey") / "app.nk"
    path.write_bytes(seed + b"\n")
    path.chmod(0o600)
    return path, nkeys.from_seed(seed).public_key.decode()


@pytest.fixture(scope="module")
def secured(certs: TestCertificates, nkey_seed_file: tuple[Path, str]) -> Iterator[LocalCluster]:
    """gRPC with mutual TLS; NATS with TLS (client certificates required) and a users
    list: Liftbridge and the app by password, another app by NKey."""
    nats_conf = "\n".join(
        [
            "tls {",
            f'  cert_file: "{certs.server_cert}"',
            f'  key_file: "{certs.server_key}"',
            f'  ca_file: "{certs.ca_cert}"',
            "  verify: true",
            "  timeout: 3",
            "}",
            "authorization {",
            "  users = [",
            f'    {{user: "liftbridge", password: "{LB_PASSWORD}"}}',
            f'    {{user: "app", password: "{APP_PASSWORD}"}}',
            f'    {{nkey: "{nkey_seed_file[1]}"}}',
            "  ]",
            "}",
        ]
    )
    config = {
        "tls.cert": str(certs.server_cert),
        "tls.key": str(certs.server_key),
        "tls.client.auth.enabled": True,
        "tls.client.auth.ca": str(certs.ca_cert),
        "nats.tls.cert": str(certs.client_cert),
        "nats.tls.key": str(certs.client_key),
        "nats.tls.ca": str(certs.ca_cert),
        "nats.user": "liftbridge",
        "nats.password": LB_PASSWORD,
    }
    with LocalCluster(1, nats_config=nats_conf, liftbridge_config=config, grpc_tls=certs) as c:
        yield c


def _grpc_tls(certs: TestCertificates) -> dict[str, str]:
    return {
        "tls.ca": str(certs.ca_cert),
        "tls.cert": str(certs.client_cert),
        "tls.key": str(certs.client_key),
    }


def _nats_tls(certs: TestCertificates) -> dict[str, str]:
    return {
        "nats.tls.ca": str(certs.ca_cert),
        "nats.tls.cert": str(certs.client_cert),
        "nats.tls.key": str(certs.client_key),
    }


def _key_lines(*paths: Path) -> list[str]:
    """The base64 lines of private keys: none may ever be printed."""
    return [
        line
        for p in paths
        for line in p.read_text().splitlines()
        if line and not line.startswith("-")
    ]


def _create(
    cluster: LocalCluster, certs: TestCertificates, stream: str, values: list[bytes]
) -> None:
    """Create ``stream`` and store ``values`` over gRPC with TLS (not through Spark)."""

    async def go() -> None:
        tls = TLSConfig(
            ca_file=certs.ca_cert, cert_file=certs.client_cert, key_file=certs.client_key
        )
        async with Client(cluster.brokers, tls=tls) as client:
            await client.create_stream(stream, stream, partitions=2)
            for i, v in enumerate(values):
                await client.publish_to_stream(stream, v, partition=i % 2, ack_policy=AckPolicy.ALL)

    asyncio.run(go())


def _stored(cluster: LocalCluster, certs: TestCertificates, stream: str) -> list[bytes]:
    async def go() -> list[bytes]:
        tls = TLSConfig(
            ca_file=certs.ca_cert, cert_file=certs.client_cert, key_file=certs.client_key
        )
        out: list[bytes] = []
        async with Client(cluster.brokers, tls=tls) as client:
            for p in range(2):
                hw = (await client.fetch_partition_metadata(stream, p)).high_watermark
                if hw < 0:
                    continue
                sub = client.subscribe(
                    stream,
                    partition=p,
                    start_position=StartPosition.EARLIEST,
                    stop_position=StopPosition.OFFSET,
                    stop_offset=hw,
                )
                async with sub:
                    out.extend([m.value async for m in sub])
        return sorted(out)

    return asyncio.run(go())


def _read(spark: Any, cluster: LocalCluster, stream: str, **options: str) -> Any:
    r = spark.read.format("liftbridge").option("brokers", ",".join(cluster.brokers))
    r = r.option("stream", stream).option("timeout", "3")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _write(df: Any, cluster: LocalCluster, stream: str, **options: str) -> None:
    w = df.write.format("liftbridge").mode("append").option("nats_url", cluster.nats_url)
    w = w.option("brokers", ",".join(cluster.brokers)).option("stream", stream)
    w = w.option("timeout", "3")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


class _Logs:
    """Every log line at DEBUG level, except py4j's trace of the commands sent to the JVM
    (which repeats every option value given to Spark, as it would a Kafka password)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    @property
    def text(self) -> str:
        return "\n".join(
            f"{r.name}: {r.getMessage()}"
            for r in self._caplog.records
            if not r.name.startswith("py4j")
        )


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[_Logs]:
    with caplog.at_level(logging.DEBUG):
        yield _Logs(caplog)


def test_read_with_mutual_tls(
    spark: Any, secured: LocalCluster, certs: TestCertificates, unique_name: Any
) -> None:
    stream = unique_name("tlsread")
    _create(secured, certs, stream, [b"a", b"b", b"c"])
    df = _read(spark, secured, stream, **_grpc_tls(certs))
    assert sorted(r.value for r in df.collect()) == [b"a", b"b", b"c"]
    plan = df._jdf.queryExecution().toString()
    for secret in _key_lines(certs.client_key):
        assert secret not in plan


@pytest.mark.parametrize("case", ["plaintext", "no-client-cert", "rogue-client", "rogue-ca"])
def test_read_with_wrong_tls_is_a_clear_error(
    spark: Any,
    secured: LocalCluster,
    certs: TestCertificates,
    rogue: TestCertificates,
    unique_name: Any,
    case: str,
) -> None:
    stream = unique_name("tlsbad")
    _create(secured, certs, stream, [b"a"])
    options = {
        "plaintext": {},
        "no-client-cert": {"tls.ca": str(certs.ca_cert)},
        "rogue-client": {
            **_grpc_tls(certs),
            "tls.cert": str(rogue.client_cert),
            "tls.key": str(rogue.client_key),
        },
        "rogue-ca": _grpc_tls(rogue),
    }[case]
    with pytest.raises(Exception, match="option 'brokers': no Liftbridge broker answered") as info:
        _read(spark, secured, stream, **options).collect()
    text = str(info.value)
    assert "tls" in text.lower()
    for secret in _key_lines(certs.client_key, rogue.client_key, certs.server_key):
        assert secret not in text


def test_write_with_password_and_tls(
    spark: Any,
    secured: LocalCluster,
    certs: TestCertificates,
    unique_name: Any,
    all_logs: _Logs,
) -> None:
    stream = unique_name("pwwrite")
    _create(secured, certs, stream, [])
    df = spark.createDataFrame([(f"v{i}",) for i in range(20)], "value string")
    _write(
        df,
        secured,
        stream,
        **_grpc_tls(certs),
        **_nats_tls(certs),
        **{"nats.user": "app", "nats.password": APP_PASSWORD},
    )
    assert _stored(secured, certs, stream) == sorted(f"v{i}".encode() for i in range(20))
    assert APP_PASSWORD not in all_logs.text


def test_write_with_nkey(
    spark: Any,
    secured: LocalCluster,
    certs: TestCertificates,
    nkey_seed_file: tuple[Path, str],
    unique_name: Any,
    all_logs: _Logs,
) -> None:
    stream = unique_name("nkwrite")
    _create(secured, certs, stream, [])
    df = spark.createDataFrame([("n1",), ("n2",)], "value string")
    seed_file = nkey_seed_file[0]
    _write(
        df,
        secured,
        stream,
        **_grpc_tls(certs),
        **_nats_tls(certs),
        **{"nats.nkeySeedFile": str(seed_file)},
    )
    assert _stored(secured, certs, stream) == [b"n1", b"n2"]
    assert seed_file.read_text().strip() not in all_logs.text


@pytest.mark.parametrize(
    "case", ["wrong-password", "no-credentials", "no-client-cert", "url-password"]
)
def test_write_with_wrong_nats_credentials_is_a_clear_error(
    spark: Any,
    secured: LocalCluster,
    certs: TestCertificates,
    unique_name: Any,
    all_logs: _Logs,
    case: str,
) -> None:
    stream = unique_name("badwrite")
    _create(secured, certs, stream, [])
    wrong = "wrong-" + secrets.token_hex(8)
    options: dict[str, str] = {**_grpc_tls(certs), **_nats_tls(certs)}
    url = secured.nats_url
    if case == "wrong-password":
        options.update({"nats.user": "app", "nats.password": wrong})
        match = "refused the credentials"
    elif case == "no-credentials":
        match = "refused the credentials"
    elif case == "url-password":
        url = url.replace("nats://", f"nats://app:{wrong}@")
        match = "refused the credentials"
    else:
        options.update({"nats.user": "app", "nats.password": APP_PASSWORD})
        del options["nats.tls.cert"], options["nats.tls.key"]
        match = "option 'nats_url'"
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match=match) as info:
        w = df.write.format("liftbridge").mode("append").option("nats_url", url)
        w = w.option("brokers", ",".join(secured.brokers)).option("stream", stream)
        for k, v in {**options, "timeout": "3"}.items():
            w = w.option(k, v)
        w.save()
    text = str(info.value)
    for secret in (wrong, APP_PASSWORD, LB_PASSWORD, *_key_lines(certs.client_key)):
        assert secret not in text
        assert secret not in all_logs.text
    assert _stored(secured, certs, stream) == []


def test_streaming_write_with_credentials_keeps_them_out_of_progress_and_plans(
    spark: Any, secured: LocalCluster, certs: TestCertificates, unique_name: Any, tmp_path: Path
) -> None:
    source, sink = unique_name("src"), unique_name("dst")
    _create(secured, certs, source, [b"s1", b"s2", b"s3"])
    _create(secured, certs, sink, [])
    r = spark.readStream.format("liftbridge").option("brokers", ",".join(secured.brokers))
    r = r.option("stream", source).option("startingOffsets", "earliest")
    for k, v in _grpc_tls(certs).items():
        r = r.option(k, v)
    w = r.load().select("value").writeStream.format("liftbridge")
    options = {
        "nats_url": secured.nats_url,
        "brokers": ",".join(secured.brokers),
        "stream": sink,
        "nats.user": "app",
        "nats.password": APP_PASSWORD,
        **_grpc_tls(certs),
        **_nats_tls(certs),
    }
    for k, v in options.items():
        w = w.option(k, v)
    query = w.option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start()
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert _stored(secured, certs, sink) == [b"s1", b"s2", b"s3"]
    shown = str(query.lastProgress) + str(query.recentProgress) + query._jsq.explainInternal(True)
    assert APP_PASSWORD not in shown


@pytest.fixture(scope="module")
def token_cluster() -> Iterator[LocalCluster]:
    """NATS with token auth (the nodes take the token from their NATS URL)."""
    conf = "\n".join(["authorization {", f'  token: "{TOKEN}"', "}"])
    with LocalCluster(1, nats_config=conf, nats_url_userinfo=TOKEN) as cluster:
        yield cluster


@pytest.mark.parametrize("right", [True, False])
def test_write_with_token(
    spark: Any,
    token_cluster: LocalCluster,
    unique_name: Any,
    all_logs: _Logs,
    right: bool,
) -> None:
    stream = unique_name("tok")

    async def create() -> None:
        async with Client(token_cluster.brokers) as client:
            await client.create_stream(stream, stream)

    asyncio.run(create())
    token = TOKEN if right else "tok-" + secrets.token_hex(12)
    df = spark.createDataFrame([("t1",)], "value string")
    if right:
        _write(df, token_cluster, stream, **{"nats.token": token})
        assert [r.value for r in _read(spark, token_cluster, stream).collect()] == [b"t1"]
    else:
        with pytest.raises(Exception, match="refused the credentials") as info:
            _write(df, token_cluster, stream, **{"nats.token": token})
        assert token not in str(info.value) and TOKEN not in str(info.value)
    assert TOKEN not in all_logs.text and token not in all_logs.text
