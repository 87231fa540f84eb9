"""NATS in operator (JWT) mode for tests: signed JWTs, creds files, and a hub server.

A creds file holds a user JWT and its NKey seed; nats-server accepts one only in
operator mode, where every client needs a JWT. Liftbridge v1.9.0 can log in to NATS
only with user/password or TLS, so :func:`operator_hub_cluster` keeps it on a
:class:`LocalCluster`'s own NATS and makes that NATS join an operator-mode hub as a
leaf node (logging in with a creds file). Applications connect to the hub with their
own creds file (:func:`write_creds`); publishes and acks cross the leaf connection.

Interest crosses that connection a moment after a stream is created: until then the
hub answers a publish to the stream's subject with "no responders".

Needs the ``nkeys`` package (the ``testing`` extra). Never use these keys outside
tests: seeds are written unencrypted.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

from liftbridge_nats.testing._cluster import LocalCluster
from liftbridge_nats.testing._install import find_nats_server
from liftbridge_nats.testing._process import free_ports, port_open

__all__ = [
    "OperatorHub",
    "new_keypair",
    "operator_hub_cluster",
    "seed_lines",
    "signed_jwt",
    "write_creds",
]

_UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed_jwt(issuer: nkeys.KeyPair, subject: str, name: str, nats_claims: dict[str, Any]) -> str:
    """An ed25519-nkey JWT signed by ``issuer``, as the NATS JWT v2 format defines it."""
    header = {"typ": "JWT", "alg": "ed25519-nkey"}
    claims = {
        "jti": base64.b32encode(secrets.token_bytes(32)).decode().rstrip("="),
        "iat": int(time.time()) - 60,
        "iss": issuer.public_key.decode(),
        "name": name,
        "sub": subject,
        "nats": {**nats_claims, "version": 2},
    }
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{_b64(issuer.sign(signing_input.encode()))}"


def new_keypair(prefix: int) -> nkeys.KeyPair:
    """A fresh NKey pair of the kind ``prefix`` names (``nkeys.PREFIX_BYTE_USER``...)."""
    return nkeys.from_seed(nkeys.encode_seed(secrets.token_bytes(32), prefix))


def write_creds(
    path: Path, account: nkeys.KeyPair, name: str, seed_of: nkeys.KeyPair | None = None
) -> Path:
    """Write a creds file (mode 0600) for a new user of ``account`` and return ``path``.

    ``seed_of`` puts another key's seed beside the JWT: a creds file whose seed does
    not match its JWT, which the server must refuse.
    """
    user = new_keypair(nkeys.PREFIX_BYTE_USER)
    token = signed_jwt(
        account,
        user.public_key.decode(),
        name,
        {"type": "user", "pub": {}, "sub": {}, **_UNLIMITED},
    )
    seed = (seed_of or user).seed.decode()
    path.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{token}\n"
        "------END NATS USER JWT------\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n"
    )
    path.chmod(0o600)
    return path


def seed_lines(creds: Path) -> list[str]:
    """The user NKey seeds in a creds file: none may ever be printed."""
    return [line for line in creds.read_text().splitlines() if line.startswith("SU")]


@dataclass(frozen=True, slots=True)
class OperatorHub:
    """The operator-mode hub: its client URL and the account its users belong to."""

    url: str
    account: nkeys.KeyPair


@contextlib.contextmanager
def operator_hub_cluster(workdir: Path) -> Iterator[tuple[LocalCluster, OperatorHub]]:
    """A 1-node LocalCluster whose NATS is a leaf node of an operator-mode hub.

    The hub's files (configuration, log, the leaf's creds file) go to ``workdir``.
    Both servers are stopped on exit.
    """
    operator = new_keypair(nkeys.PREFIX_BYTE_OPERATOR)
    account = new_keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    operator_jwt = signed_jwt(
        operator, operator.public_key.decode(), "lbn-test-operator", {"type": "operator"}
    )
    account_jwt = signed_jwt(
        operator,
        account.public_key.decode(),
        "lbn-test-account",
        {
            "type": "account",
            "limits": {
                **_UNLIMITED,
                "imports": -1,
                "exports": -1,
                "wildcards": True,
                "conn": -1,
                "leaf": -1,
            },
        },
    )
    client_port, leaf_port = free_ports(2)
    hub_conf = workdir / "hub.conf"
    hub_conf.write_text(
        "\n".join(
            [
                f"listen: 127.0.0.1:{client_port}",
                f'operator: "{operator_jwt}"',
                "resolver: MEMORY",
                f'resolver_preload: {{ {account.public_key.decode()}: "{account_jwt}" }}',
                f"leafnodes {{ listen: 127.0.0.1:{leaf_port} }}",
            ]
        )
        + "\n"
    )
    log = (workdir / "hub.log").open("wb")
    hub = subprocess.Popen(
        [str(find_nats_server()), "-c", str(hub_conf)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 10
        while not port_open(client_port, 0.2) or not port_open(leaf_port, 0.2):
            if hub.poll() is not None:
                raise RuntimeError(
                    "the operator-mode hub exited: " + (workdir / "hub.log").read_text()
                )
            if time.monotonic() > deadline:
                raise RuntimeError("the operator-mode hub did not start within 10 s")
            time.sleep(0.05)
        leaf_creds = write_creds(workdir / "leaf.creds", account, "liftbridge-leaf")
        leaf = "\n".join(
            [
                "leafnodes {",
                "  remotes = [",
                f'    {{ url: "nats-leaf://127.0.0.1:{leaf_port}", credentials: "{leaf_creds}" }}',
                "  ]",
                "}",
            ]
        )
        with LocalCluster(1, nats_config=leaf) as cluster:
            yield cluster, OperatorHub(f"nats://127.0.0.1:{client_port}", account)
    finally:
        hub.kill()
        hub.wait()
        log.close()
