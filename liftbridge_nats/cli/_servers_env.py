"""``servers env``: the dev cluster's addresses as environment variables.

``eval "$(liftbridge-nats servers env)"`` points the current shell, and every program it
starts, at the cluster of ``servers start``: the CLI reads ``LIFTBRIDGE_NATS_URL`` and
``LIFTBRIDGE_BROKERS``, and so can a user's own script (the README's first example
does).
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ._common import ENV_BROKERS, ENV_NATS_URL, EXIT_NOT_RUNNING, EXIT_OK, live_state
from ._output import Console

_FORMATS = ("sh", "fish", "dotenv")


def register(servers: Any) -> None:
    """Add ``env`` to the ``servers`` sub-commands."""
    env = servers.add_parser(
        "env",
        help="print the dev cluster's addresses as export lines (exit 3 if none runs)",
        description="Print the dev cluster's addresses as environment variables "
        f"({ENV_NATS_URL}, {ENV_BROKERS}), so that a shell and the programs it starts find "
        'it: eval "$(liftbridge-nats servers env)". Prints nothing and exits 3 when no '
        "dev cluster runs.",
    )
    env.add_argument(
        "--format",
        choices=_FORMATS,
        default="sh",
        help="sh: export lines for sh, bash and zsh (default); fish: set -gx lines; "
        "dotenv: NAME=value lines for .env files and docker --env-file",
    )
    env.set_defaults(handler=_env)


def env_lines(state: dict[str, Any], fmt: str = "sh") -> list[str]:
    """The lines that set the addresses recorded in a dev cluster ``state``."""
    variables = {
        ENV_NATS_URL: str(state["nats_url"]),
        ENV_BROKERS: ",".join(state["brokers"]),
    }
    if fmt == "fish":
        return [f"set -gx {name} {shlex.quote(value)};" for name, value in variables.items()]
    if fmt == "dotenv":
        return [f"{name}={value}" for name, value in variables.items()]
    return [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]


async def _env(args: argparse.Namespace, console: Console) -> int:
    state = live_state()
    if state is None:
        console.error("no dev cluster is running (start one with `liftbridge-nats servers start`)")
        return EXIT_NOT_RUNNING
    for line in env_lines(state, args.format):
        console.print(line)
    return EXIT_OK
