"""The CLI rewrites the SDK's advice for Python callers into CLI words; every phrase it
rewrites must still be what the SDK says (else the rewrite silently stops working)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from liftbridge_nats._acks import no_responders_exception
from liftbridge_nats.cli._hints import _REWRITES, cli_hints

PACKAGE = Path(__file__).resolve().parents[2] / "liftbridge_nats"
# What a Python call looks like in a message: name(...) or name=value.
PYTHON_CALL = re.compile(r"\b[a-z_]+\((\.\.\.|[a-z_]*=|\))|\b[a-z_]+=(True|False|\d)")


def _sdk_strings() -> str:
    """Every string literal of the SDK outside the CLI, adjacent literals joined."""
    texts = []
    for path in PACKAGE.rglob("*.py"):
        if "cli" in path.parts or "_proto" in path.parts:
            continue
        source = path.read_text()
        # Join implicitly concatenated literals ("a " "b" over lines) and f-string parts.
        joined = re.sub(r"\"\s*\n\s*f?\"", "", source)
        texts += re.findall(r"f?\"((?:[^\"\\\n]|\\.)*)\"", joined)
    return "\n".join(texts)


@pytest.mark.parametrize(("sdk", "cli"), _REWRITES, ids=[sdk[:40] for sdk, _ in _REWRITES])
def test_every_rewritten_phrase_is_still_the_sdks(sdk: str, cli: str) -> None:
    assert sdk in _sdk_strings(), f"the SDK no longer says {sdk!r}: update the CLI's hints"
    assert not PYTHON_CALL.search(cli), cli


def test_no_responders_advice_in_cli_words() -> None:
    text = cli_hints(str(no_responders_exception("orders", "c-1")))
    assert "liftbridge-nats stream create" in text and not PYTHON_CALL.search(text), text
