"""Every Python snippet of the guides (``docs/**/*.md``) runs as a reader would paste it.

The convention is the one docs/index.md gives its readers ("Running the examples"): the
snippets of a page run in order, in one namespace, as ``python -m asyncio`` runs what
is typed into it (top-level ``await``), after the set-up snippet of docs/index.md, with
the cluster named by ``LIFTBRIDGE_NATS_URL`` and ``LIFTBRIDGE_BROKERS``. Here that is a
1-node cluster of this module's own, since every page creates an ``orders`` stream; the
streams a page created are deleted after it. Each page runs in a fresh interpreter
(``python -W error``), this file run as a script.

A snippet that cannot run so carries MyST comment lines just above its fence:

- ``% example: setup``: the set-up every page starts from (one, in docs/index.md);
- ``% example: not run: <why>``: skipped, and the reason must be given;
- ``% example: run by <test file>``: another test runs it, and that file must exist
  and name the page.

Any other comment above a snippet is just a comment: the snippet runs.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SETUP, NOT_RUN, RUN_BY, RUN = "setup", "not run", "run by", "run"

_FENCE = re.compile(r"^(`{3,})\s*([^`]*)$")


@dataclass(frozen=True)
class Snippet:
    page: str  # relative to the repository root
    line: int  # of the first line of code, 1-based
    code: str
    kind: str
    note: str  # the reason (not run) or the test file (run by)


def snippets(path: Path, root: Path = ROOT) -> list[Snippet]:
    """The Python snippets of a Markdown page, with what their markers say."""
    lines = path.read_text().splitlines()
    found: list[Snippet] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, info = opening.groups()
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != fence:
            end += 1
        if info.strip() == "python":
            comments: list[str] = []
            above = i - 1
            while above >= 0 and lines[above].startswith("%"):
                comments.insert(0, lines[above][1:].strip())
                above -= 1
            kind, note = _marker(" ".join(comments))
            code = "\n".join(lines[i + 1 : end]) + "\n"
            found.append(Snippet(str(path.relative_to(root)), i + 2, code, kind, note))
        i = end + 1
    return found


def _marker(comment: str) -> tuple[str, str]:
    if not comment.startswith("example:"):
        return RUN, ""
    text = comment.removeprefix("example:").strip()
    if text == SETUP:
        return SETUP, ""
    if text.startswith(NOT_RUN + ":"):
        return NOT_RUN, text.removeprefix(NOT_RUN + ":").strip()
    if text.startswith(RUN_BY + " "):
        return RUN_BY, text.removeprefix(RUN_BY + " ").split()[0].rstrip(",.;:")
    raise ValueError(f"unknown example marker: {comment!r}")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)


def _setup() -> Snippet:
    (setup,) = [s for s in snippets(DOCS / "index.md") if s.kind == SETUP]
    return setup


# ------------------------------------------------------------------ the conventions


def test_markers_are_known_few_and_justified() -> None:
    every = [s for page in _pages() for s in snippets(page)]
    kinds = [s.kind for s in every]
    assert kinds.count(SETUP) == 1 and _setup().page == "docs/index.md"
    for snippet in every:
        where = f"{snippet.page}:{snippet.line}"
        if snippet.kind == NOT_RUN:
            assert len(snippet.note) > 20, f"{where}: say why it is not run"
        if snippet.kind == RUN_BY:
            test_file = ROOT / snippet.note
            assert test_file.is_file(), f"{where}: {snippet.note} does not exist"
            assert snippet.page in test_file.read_text(), (
                f"{where}: {snippet.note} does not read it"
            )
    # Used sparingly: most snippets run here.
    assert kinds.count(RUN) >= 15
    assert kinds.count(NOT_RUN) + kinds.count(RUN_BY) <= 6


def test_a_marker_only_counts_right_above_a_fence(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "% example: not run: a snippet that needs something this page cannot give\n"
        "\n```python\nx = 1\n```\n"
        "% a plain comment\n```python\ny = 2\n```\n"
        "% example: run by tests/a.py, with more words\n% on two lines\n```python\nz = 3\n```\n"
    )
    found = snippets(page, root=tmp_path)
    assert [(s.kind, s.note, s.line, s.code) for s in found] == [
        (RUN, "", 4, "x = 1\n"),
        (RUN, "", 8, "y = 2\n"),
        (RUN_BY, "tests/a.py", 13, "z = 3\n"),
    ]
    with pytest.raises(ValueError, match="unknown example marker"):
        _marker("example: sometimes")


# ------------------------------------------------------------------ running the pages

# Pages whose snippets need more than the cluster: the marks say what.
_MARKS: dict[str, list[pytest.MarkDecorator]] = {
    "security.md": [
        pytest.mark.processes_only(
            "the TLS set-up example starts a LocalCluster with certificate files from the host"
        )
    ],
    "spark.md": [pytest.mark.spark, pytest.mark.slow],
}


def _runnable_pages() -> list[Any]:
    params = []
    for page in _pages():
        if page.name == "index.md" or not [s for s in snippets(page) if s.kind == RUN]:
            continue
        name = str(page.relative_to(DOCS))
        params.append(pytest.param(page, id=name, marks=_MARKS.get(name, [])))
    return params


@pytest.fixture(scope="module")
def docs_cluster() -> Iterator[Any]:
    """A 1-node cluster for these pages alone, on the selected backend."""
    from liftbridge_nats.testing import ContainerCluster, new_cluster
    from liftbridge_nats.testing.pytest_plugin import require_docker

    cluster = new_cluster(1)
    if isinstance(cluster, ContainerCluster):
        require_docker()
    with cluster:
        yield cluster


async def _streams(brokers: list[str]) -> set[str]:
    from liftbridge_nats import Client

    async with Client(brokers) as client:
        return set((await client.fetch_metadata()).streams)


async def _delete(brokers: list[str], names: set[str]) -> None:
    from liftbridge_nats import Client

    async with Client(brokers) as client:
        for name in sorted(names):
            await client.delete_stream(name)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("page", _runnable_pages())
async def test_the_snippets_of_a_page_run(page: Path, docs_cluster: Any, tmp_path: Path) -> None:
    brokers = list(docs_cluster.brokers)
    blocks = [_setup(), *(s for s in snippets(page) if s.kind == RUN)]
    plan = tmp_path / "snippets.json"
    plan.write_text(json.dumps([asdict(s) for s in blocks]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFTBRIDGE_")}
    env.update(
        LIFTBRIDGE_NATS_URL=docs_cluster.nats_url,
        LIFTBRIDGE_BROKERS=",".join(brokers),
        # Spark's Python workers must run this interpreter (the venv with the package).
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    before = await _streams(brokers)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-W",
            "error",
            __file__,
            str(plan),
            cwd=tmp_path,  # Spark's warehouse and metastore land here
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 400)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode == 0, out.decode() + err.decode()
    finally:
        created = {s for s in await _streams(brokers) - before if not s.startswith("__")}
        await _delete(brokers, created)


# ------------------------------------------------------------------ the runner


def run_snippets(plan: Path) -> None:
    """Run the snippets of ``plan`` in order, in one namespace, with top-level await; the
    set-up's ``nc`` and ``client`` are closed at the end, whatever the page rebinds."""
    blocks = [Snippet(**block) for block in json.loads(plan.read_text())]
    namespace: dict[str, Any] = {"__name__": "__main__"}

    async def run_all() -> None:
        opened: list[Any] = []
        try:
            for block in blocks:
                # Blank lines first, so that a traceback names the line of the page.
                source = "\n" * (block.line - 1) + block.code
                code = compile(
                    source, str(ROOT / block.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
                )
                result = eval(code, namespace)
                if inspect.isawaitable(result):
                    await result
                if block.kind == SETUP:
                    opened = [namespace["client"], namespace["nc"]]
        finally:
            for resource in opened:
                await resource.close()

    asyncio.run(run_all())


if __name__ == "__main__":
    run_snippets(Path(sys.argv[1]))
