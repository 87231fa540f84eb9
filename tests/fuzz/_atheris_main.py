"""libFuzzer entry point (run by ``tests.fuzz.run --engine atheris`` in a subprocess).

Arguments are libFuzzer's (``-runs=N``, corpus directories); the target comes from
``LBN_FUZZ_TARGET``: ``wire`` (the default: the three network-facing wire decoders,
anything but EnvelopeError propagates), ``h2`` or ``hpack`` (the read path's HTTP/2
client and HPACK decoder: a broken contract raises, see tests/fuzz/_h2_targets.py).
atheris reports what propagates as a crash.
"""

from __future__ import annotations

import contextlib
import os
import sys

import atheris
from atheris.import_hook import instrument_imports

_TARGET = os.environ.get("LBN_FUZZ_TARGET", "wire")

if _TARGET == "wire":
    with instrument_imports():
        from liftbridge_nats import EnvelopeError, envelope, wire
else:
    # Only the HTTP/2 modules are instrumented (the package around them is not: it
    # takes seconds), before the targets import them.
    from liftbridge_nats import EnvelopeError, envelope, wire

    with instrument_imports():
        import liftbridge_nats._h2
        import liftbridge_nats._hpack  # noqa: F401

from tests.fuzz import _h2_targets  # noqa: E402 (after the instrumented imports)

# Self-test of the harness: with this variable set, any decoded ACK envelope (any input
# that reads, for the HTTP/2 targets) counts as a crash, so the test suite can check
# that findings are reported.
_PLANTED = os.environ.get("LBN_FUZZ_PLANTED_BUG") == "1"


def one_input(data: bytes) -> None:
    """Feed ``data`` to the three network-facing decoders."""
    for decode in (envelope.decode, wire.decode_ack, wire.decode_publish):
        with contextlib.suppress(EnvelopeError):
            result = decode(data)
            if _PLANTED and decode is wire.decode_ack:
                raise RuntimeError(f"planted bug: decoded {result!r}")


def one_h2_input(data: bytes) -> None:
    """Feed ``data`` to a client connection (see ``_h2_targets.h2_one``)."""
    outcome = _h2_targets.h2_one(data)
    if _PLANTED and outcome.startswith("read") and len(data) > 3:
        raise RuntimeError(f"planted bug: {outcome}")


def one_hpack_input(data: bytes) -> None:
    """Decode ``data``'s blocks (see ``_h2_targets.hpack_one``)."""
    outcome = _h2_targets.hpack_one(data)
    if _PLANTED and outcome == "decoded" and len(data) > 3:
        raise RuntimeError(f"planted bug: {outcome}")


_ENTRIES = {"wire": one_input, "h2": one_h2_input, "hpack": one_hpack_input}

if __name__ == "__main__":
    atheris.Setup(sys.argv, _ENTRIES[_TARGET])
    atheris.Fuzz()
