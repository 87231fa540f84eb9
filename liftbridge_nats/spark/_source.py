"""The ``liftbridge`` data source: option parsing, then the right reader or writer."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from liftbridge_nats.errors import InvalidArgumentError

from ._options import parse_read_options, parse_write_options
from ._reader import LiftbridgeReader
from ._schema import READ_SCHEMA, check_read_schema
from ._stream_reader import LiftbridgeStreamReader
from ._writer import LiftbridgeStreamWriter, LiftbridgeWriter

__all__ = ["LiftbridgeDataSource"]


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise InvalidArgumentError(
            "save mode 'overwrite' is not supported: a Liftbridge stream is an append-only "
            "log; use mode('append')."
        )


class LiftbridgeDataSource(DataSource):
    """Spark data source ``"liftbridge"``; register with ``spark.dataSource.register``.

    Read options: ``brokers`` (required), ``stream`` (required), ``startingOffsets``
    (``earliest`` / ``latest`` / ``{"stream": {"0": 12, "1": -2}}``, -2 earliest,
    -1 latest), ``endingOffsets`` (batch only, exclusive), ``startingTimestamp`` (ms
    since the epoch), ``maxOffsetsPerSplit`` (default 100000), ``maxOffsetsPerTrigger``
    (streaming), ``resumePaused`` (default true), ``timeout`` (s, default 10).

    Write options: ``nats_url`` (required), ``stream`` (+ ``brokers``) or ``subject``,
    ``ack_policy`` (ALL (default), LEADER, NONE), ``ack_timeout`` (s, default 30),
    ``max_inflight`` (default 4096), ``timeout`` (s). Columns: ``value`` (binary or
    string, required), ``key``, ``headers`` (map), ``partition`` (int). Option names
    ignore case and underscores.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``liftbridge``."""
        return "liftbridge"

    def schema(self) -> StructType:
        """stream, partition, offset, key, value, timestamp, subject, headers."""
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        """Batch reader over a snapshot planned now."""
        check_read_schema(schema)
        return LiftbridgeReader(parse_read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Micro-batch reader with offsets in Spark's checkpoint."""
        check_read_schema(schema)
        return LiftbridgeStreamReader(parse_read_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Batch sink; every task publishes with acks."""
        _append_only(overwrite)
        return LiftbridgeWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Streaming sink, at-least-once per micro-batch."""
        return LiftbridgeStreamWriter(parse_write_options(self.options), schema)
