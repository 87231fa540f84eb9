"""Run one benchmark case in this process and print its result as one JSON line.

Usage (the runner does this): ``python -m bench.worker '<json spec>'``. The spec names
the client module under ``bench.clients`` and the action (``publish``, ``latency``,
``subscribe``, ``raw``...): a coroutine function, run on an event loop, or a plain
function (the blocking API's cases), called in the main thread with no loop running. The last line of stdout is the result; errors go to stderr
and a non-zero exit status.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import inspect
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any


class _Blocked(importlib.abc.MetaPathFinder):
    """Makes packages unimportable in this process, as if they were not installed."""

    def __init__(self, names: list[str]) -> None:
        self._names = tuple(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.split(".", 1)[0] in self._names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by the bench)")
        return None


def _run(main: Coroutine[Any, Any, dict[str, Any]], use_uvloop: bool) -> dict[str, Any]:
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if use_uvloop:
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def main(argv: list[str]) -> int:
    """Entry point of a worker process."""
    if len(argv) != 2:
        print("usage: python -m bench.worker '<json spec>'", file=sys.stderr)
        return 2
    spec: dict[str, Any] = json.loads(argv[1])
    if spec.get("block_imports"):
        # Before anything of the client is imported.
        sys.meta_path.insert(0, _Blocked(spec["block_imports"]))
    module = importlib.import_module(f"bench.clients.{spec['module']}")
    action = getattr(module, spec["action"])
    if inspect.iscoroutinefunction(action):
        result = _run(action(spec), bool(spec.get("uvloop")))
    else:  # a client of the blocking API: no event loop in this thread
        result = action(spec)
    if spec.get("uvloop"):
        result["loop"] = "uvloop"
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
