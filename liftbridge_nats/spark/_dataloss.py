"""``failOnDataLoss``: offsets a query expected that the cluster no longer has.

Retention (by age, size or count) and compaction remove messages; a stream can be
deleted, or deleted and created again. When a read finds offsets it planned to read
gone, it either fails with :class:`DataLossError` (``failOnDataLoss`` true, the
default) or skips them and logs a warning naming what was skipped.
"""

from __future__ import annotations

from liftbridge_nats import LiftbridgeError
from liftbridge_nats._log import get_logger

__all__ = ["DataLossError", "data_loss", "missing_offsets"]

_log = get_logger("spark")

_HOW_TO_SKIP = "set option 'failOnDataLoss' to false to skip what is gone (each skip is logged)"


class DataLossError(LiftbridgeError):
    """Offsets a query expected to read are no longer stored (retention, compaction,
    or a deleted stream). Raised only with option ``failOnDataLoss`` true (the default).
    """


def data_loss(fail: bool, what: str) -> None:
    """Raise :class:`DataLossError` for ``what`` (``fail``), or log it as skipped."""
    if fail:
        raise DataLossError(f"{what}; {_HOW_TO_SKIP}.")
    _log.warning("failOnDataLoss is false, skipped: %s", what)


def missing_offsets(stream: str, partition: int, first: int, until: int) -> str:
    """How to say that ``[first, until)`` of a partition is gone."""
    span = f"offset {first}" if until - first == 1 else f"offsets {first} to {until - 1}"
    return (
        f"stream {stream!r} partition {partition}: {span} can no longer be read (removed by "
        "retention or compaction, or the stream was deleted and created again)"
    )
