"""The Spark sink logging in to NATS in operator (JWT) mode with ``nats.credsFile``.

The application side (the sink's tasks) connects to an operator-mode hub with a creds
file; Liftbridge sits on a leaf node of that hub (see ``liftbridge_nats.testing._jwt``).
With a creds file the hub refuses, the write fails with an error naming the problem,
and no seed appears in it or in a log line.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import nats
import nkeys
import pytest
from spark_helpers import create_stream, read_all

from liftbridge_nats import AckPolicy, Publisher
from liftbridge_nats.testing import LocalCluster
from liftbridge_nats.testing._jwt import (
    OperatorHub,
    new_keypair,
    seed_lines,
    write_creds,
)

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(300),
    pytest.mark.processes_only(
        "runs an operator-mode nats-server hub with a LocalCluster as its leaf node; "
        "ContainerCluster takes no nats_config"
    ),
]


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured log line but py4j's (which echoes each option sent to the JVM)."""
    return "\n".join(
        f"{r.name}: {r.getMessage()}" for r in caplog.records if not r.name.startswith("py4j")
    )


def _write(df: Any, hub: OperatorHub, cluster: LocalCluster, stream: str, creds: Path) -> None:
    (
        df.write.format("liftbridge")
        .mode("append")
        .option("nats_url", hub.url)
        .option("nats.credsFile", str(creds))
        .option("brokers", ",".join(cluster.brokers))
        .option("stream", stream)
        .option("timeout", "3")
        .save()
    )


async def _first_message_through_the_hub(url: str, creds: Path, stream: str) -> None:
    """Publish one message to ``stream`` through the hub, resending until the stream's
    subscription has crossed the leaf connection (the sink does not resend: "no
    responders" fails its task)."""
    nc = await nats.connect(url, user_credentials=str(creds), connect_timeout=3)
    try:
        async with Publisher(nc, ack_timeout=10, retry=True) as pub:
            ack = await pub.publish(stream, b"probe", ack_policy=AckPolicy.ALL)
        assert ack is not None and ack.offset == 0
    finally:
        await nc.close()


def test_write_with_creds_file_through_an_operator_mode_server(
    spark: Any,
    jwt_hub_cluster: tuple[LocalCluster, OperatorHub],
    tmp_path: Path,
    unique_name: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster, hub = jwt_hub_cluster
    creds = write_creds(tmp_path / "app.creds", hub.account, "spark-app")
    stream = unique_name("credswrite")
    create_stream(cluster, stream, 1)
    asyncio.run(_first_message_through_the_hub(hub.url, creds, stream))
    rows = [f"c{i}" for i in range(50)]
    df = spark.createDataFrame([(v,) for v in rows], "value string").repartition(2)
    with caplog.at_level(logging.DEBUG):
        _write(df, hub, cluster, stream, creds)
    stored = [m.value for m in read_all(cluster, stream)]
    assert stored[0] == b"probe"
    assert sorted(stored[1:]) == sorted(v.encode() for v in rows)
    for seed in seed_lines(creds):
        assert seed not in _logged(caplog)


@pytest.mark.parametrize("case", ["foreign-seed", "unknown-account"])
def test_write_with_a_wrong_creds_file_is_a_clear_error(
    spark: Any,
    jwt_hub_cluster: tuple[LocalCluster, OperatorHub],
    tmp_path: Path,
    unique_name: Any,
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    cluster, hub = jwt_hub_cluster
    if case == "foreign-seed":
        stranger = new_keypair(nkeys.PREFIX_BYTE_USER)
        creds = write_creds(tmp_path / "bad.creds", hub.account, "app", seed_of=stranger)
    else:
        creds = write_creds(tmp_path / "bad.creds", new_keypair(nkeys.PREFIX_BYTE_ACCOUNT), "app")
    stream = unique_name("credsbad")
    create_stream(cluster, stream, 1)
    df = spark.createDataFrame([("x",)], "value string")
    with caplog.at_level(logging.DEBUG), pytest.raises(Exception) as info:
        _write(df, hub, cluster, stream, creds)
    text = str(info.value)
    assert "option 'nats_url'" in text and "refused the credentials" in text, text
    for seed in seed_lines(creds):
        assert seed not in text
        assert seed not in _logged(caplog)
    assert read_all(cluster, stream) == []
