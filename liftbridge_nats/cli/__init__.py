"""The ``liftbridge-nats`` command line.

One module per command group (``_servers``, ``_streams``, ``_publish``, ``_subscribe``,
``_cursors``, ``_activity``, ``_bench``) registers its sub-commands; every command is an
``async`` handler returning an exit status. This module only builds the parser and turns
failures into one line on stderr: SDK errors exit 1, argument errors 2, Ctrl-C 130.
Heavy imports (gRPC, nats-py) happen inside the handlers so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from liftbridge_nats import LiftbridgeError

from . import _activity, _bench, _cursors, _publish, _servers, _streams, _subscribe
from ._common import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, CliError, Handler
from ._output import Console

__all__ = ["build_parser", "main"]

_EPILOG = """\
Server addresses: --nats/--brokers, else $LIFTBRIDGE_NATS_URL/$LIFTBRIDGE_BROKERS, else the
dev cluster of `liftbridge-nats servers start`, else nats://127.0.0.1:4222 and 127.0.0.1:9292.
Exit status: 0 ok, 1 error (servers status: a server is down), 2 bad arguments, 3 no dev
cluster (servers status), 130 Ctrl-C.
"""


def build_parser() -> argparse.ArgumentParser:
    """The complete argument parser (every command has ``--help``)."""
    from liftbridge_nats import __version__

    parser = argparse.ArgumentParser(
        prog="liftbridge-nats",
        description="Work with Liftbridge streams over NATS and gRPC from the shell.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour output: auto (only on a terminal, default), always, never; "
        "NO_COLOR in the environment always turns it off",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (
        _servers,
        _streams,
        _publish,
        _subscribe,
        _cursors,
        _activity,
        _bench,
    ):
        module.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return its exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and argument errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    console = Console(colour=args.color)
    handler: Handler = args.handler
    try:
        return asyncio.run(handler(args, console))
    except KeyboardInterrupt:
        console.info("interrupted")
        return EXIT_INTERRUPTED
    except CliError as exc:
        console.error(str(exc))
        return exc.status
    except LiftbridgeError as exc:
        console.error(str(exc) or type(exc).__name__)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, like other Unix tools.
        _silence_stdout()
        return EXIT_ERROR
    except OSError as exc:
        console.error(f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc))
        return EXIT_ERROR


def _silence_stdout() -> None:
    # Python flushes stdout at exit; point it at /dev/null so that flush cannot fail again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
