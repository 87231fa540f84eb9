"""liftbridge-nats shares a process with other Liftbridge clients.

gufo-liftbridge and stubs generated from Liftbridge's ``api.proto`` register the file
``api.proto`` (package ``proto``) in protobuf's default descriptor pool; the SDK keeps
its schema in a private pool, so every import order works. Each case runs in a fresh
interpreter (imports happen once per process) and talks to a real server with both
libraries: what one writes, the other reads.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import descriptor_pool

from liftbridge_nats._proto import api_pb2
from liftbridge_nats.testing import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("_coexistence_probe.py")

pytestmark = pytest.mark.timeout(120)


def test_schema_lives_in_a_private_pool_with_the_server_names() -> None:
    assert api_pb2.DESCRIPTOR.pool is not descriptor_pool.Default()
    assert api_pb2.DESCRIPTOR.name == "api.proto"
    assert api_pb2.DESCRIPTOR.package == "proto"
    # The gRPC method paths are the server's.
    assert api_pb2.DESCRIPTOR.services_by_name["API"].full_name == "proto.API"
    from liftbridge_nats._proto import api_pb2_grpc

    source = Path(api_pb2_grpc.__file__).read_text()
    assert "'/proto.API/Subscribe'" in source and "'/proto.API/Publish'" in source


@pytest.fixture(scope="module")
def user_stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``api_pb2`` / ``api_pb2_grpc`` generated with plain protoc, as an application
    holding its own Liftbridge stubs has them (default pool, top-level modules).

    liftbridge-api's ``api.proto`` differs from ours in its options (it sets
    ``java_package``), and protobuf refuses a second ``api.proto`` only when the two
    differ (an identical copy is accepted twice), so the copy gets that option too.
    """
    from grpc_tools import protoc

    out = tmp_path_factory.mktemp("user_stubs")
    schema = (ROOT / "proto" / "api.proto").read_text()
    assert schema.count("package proto;\n") == 1
    (out / "api.proto").write_text(
        schema.replace(
            "package proto;\n", 'package proto;\noption java_package = "io.liftbridge.proto";\n'
        )
    )
    args = [
        "protoc",
        f"-I{out}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        str(out / "api.proto"),
    ]
    assert protoc.main(args) == 0
    return out


async def _probe(order: str, cluster: LocalCluster, stream: str, *extra: str) -> dict[str, object]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-W",
        "error",
        str(PROBE),
        order,
        cluster.brokers[0],
        cluster.nats_url,
        stream,
        *extra,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    result: dict[str, object] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("order", ["gufo,sdk", "sdk,gufo"])
async def test_beside_gufo_liftbridge(
    order: str, liftbridge_cluster: LocalCluster, unique_name: Callable[[str], str]
) -> None:
    stream = unique_name("gufo")
    result = await _probe(order, liftbridge_cluster, stream)
    assert result == {
        "sdk_offset": 0,
        "peer_read": ["sdk", "gufo"],
        "sdk_read": ["sdk", "gufo"],
    }


@pytest.mark.parametrize("order", ["stubs,sdk", "sdk,stubs"])
async def test_beside_stubs_generated_from_api_proto(
    order: str,
    liftbridge_cluster: LocalCluster,
    unique_name: Callable[[str], str],
    user_stubs: Path,
) -> None:
    stream = unique_name("stubs")
    result = await _probe(order, liftbridge_cluster, stream, str(user_stubs))
    assert result == {
        "sdk_offset": 0,
        "peer_offset": 1,
        "peer_streams": [stream],
        "sdk_read": ["sdk", "stubs"],
    }
