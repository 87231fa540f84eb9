"""libFuzzer entry point (run by ``tests.fuzz.run --engine atheris`` in a subprocess).

Arguments are libFuzzer's (``-runs=N``, corpus directories). A decoder raising
anything but EnvelopeError propagates, and atheris reports it as a crash.
"""

from __future__ import annotations

import contextlib
import os
import sys

import atheris
from atheris.import_hook import instrument_imports

with instrument_imports():
    from liftbridge_nats import EnvelopeError, envelope, wire


# Self-test of the harness: with this variable set, any decoded ACK envelope counts as
# a crash, so the test suite can check that findings are reported.
_PLANTED = os.environ.get("LBN_FUZZ_PLANTED_BUG") == "1"


def one_input(data: bytes) -> None:
    """Feed ``data`` to the three network-facing decoders."""
    for decode in (envelope.decode, wire.decode_ack, wire.decode_publish):
        with contextlib.suppress(EnvelopeError):
            result = decode(data)
            if _PLANTED and decode is wire.decode_ack:
                raise RuntimeError(f"planted bug: decoded {result!r}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
