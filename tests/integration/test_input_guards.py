"""What a new user mistypes gets a clear answer: wrong argument types name the argument,
a publish to a readonly stream says so, and the pytest example of the testing guide
(docs/testing.md) runs as shown."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeAlias

import pytest
from nats.aio.client import Client as NATS

from liftbridge_nats import (
    AckTimeoutError,
    Client,
    InvalidArgumentError,
    Publisher,
    ReadonlyPartitionError,
)
from liftbridge_nats.testing import LocalCluster

TESTING_GUIDE = Path(__file__).resolve().parents[2] / "docs/testing.md"

# Values of the wrong type on purpose, since the SDK must refuse them at run time: Any is
# how they get past its typed signatures.
BadArgs: TypeAlias = dict[str, Any]


@pytest.mark.parametrize(
    ("args", "kwargs", "argument"),
    [
        ((None,), {}, "nc"),
        (("nats://127.0.0.1:4222",), {}, "nc"),
        ((object(),), {}, "nc"),
    ],
)
def test_publisher_without_a_nats_client_is_a_type_error(
    args: tuple[Any, ...], kwargs: BadArgs, argument: str
) -> None:
    with pytest.raises(TypeError, match=rf"^{argument} must be a connected nats-py client"):
        Publisher(*args, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"client": "127.0.0.1:9292"}, "client"),
        ({"ack_timeout": "5"}, "ack_timeout"),
        ({"retry_deadline": "30"}, "retry_deadline"),
    ],
)
def test_publisher_wrong_types_name_the_argument(
    nats_client: NATS, kwargs: BadArgs, argument: str
) -> None:
    with pytest.raises(TypeError, match=rf"^{argument} must be"):
        Publisher(nats_client, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"timeout": "5"}, "timeout"),
        ({"timeout": None}, "timeout"),
        ({"resubscribe_wait": "30"}, "resubscribe_wait"),
        ({"metadata_max_age": [30]}, "metadata_max_age"),
        ({"max_partitions": "256"}, "max_partitions"),
    ],
)
def test_client_wrong_types_name_the_argument(kwargs: BadArgs, argument: str) -> None:
    with pytest.raises(TypeError, match=rf"^{argument} must be"):
        Client("127.0.0.1:9292", **kwargs)


def test_client_value_errors_name_the_argument() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^timeout must be a finite"):
        Client("127.0.0.1:9292", timeout=float("inf"))
    with pytest.raises(InvalidArgumentError, match=r"^max_partitions must be between"):
        Client("127.0.0.1:9292", max_partitions=0)


@pytest.fixture
async def client(liftbridge_cluster: LocalCluster) -> AsyncIterator[Client]:
    async with Client(liftbridge_cluster.brokers, timeout=10) as c:
        yield c


async def test_per_call_timeout_of_the_wrong_type_names_it(client: Client) -> None:
    with pytest.raises(TypeError, match=r"^timeout must be a number of seconds"):
        await client.fetch_metadata(timeout="5")  # type: ignore[arg-type]


async def test_publish_to_a_readonly_stream_says_readonly(
    client: Client, nats_client: NATS, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("readonly")
    await client.create_stream(name, name)
    await client.set_stream_readonly(name)
    async with Publisher(nats_client, client=client, ack_timeout=1.0) as pub:
        # Through the stream: the timeout is explained by the partition's state.
        with pytest.raises(ReadonlyPartitionError) as info:
            await pub.publish_to_stream(name, b"refused")
        message = str(info.value)
        assert "readonly" in message and name in message
        assert isinstance(info.value.__cause__, AckTimeoutError)
        # On a bare subject the publisher knows no stream: readonly is among the causes.
        with pytest.raises(AckTimeoutError) as timeout:
            await pub.publish(name, b"refused too")
        assert "readonly" in str(timeout.value)
    await client.set_stream_readonly(name, readonly=False)
    async with Publisher(nats_client, client=client, ack_timeout=5.0) as pub:
        ack = await pub.publish_to_stream(name, b"accepted")
    assert ack is not None and ack.offset == 0


def _guide_blocks() -> tuple[str, str]:
    text = TESTING_GUIDE.read_text()
    section = text.split("## The pytest plugin\n", 1)[1].split("\n## ", 1)[0]
    ini = re.findall(r"```ini\n(.*?)```", section, re.S)
    code = re.findall(r"```python\n(.*?)```", section, re.S)
    assert ini and code, "the testing guide's pytest section lost its pytest.ini or its test"
    return ini[0], code[0]


@pytest.mark.slow
def test_guide_pytest_example_passes_in_an_empty_folder(tmp_path: Path) -> None:
    ini, code = _guide_blocks()
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "test_orders.py").write_text(code)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-W", "error", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
