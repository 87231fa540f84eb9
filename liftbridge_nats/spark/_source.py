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

from liftbridge_nats import InvalidArgumentError

from ._micro_batch_reader import LiftbridgeStreamReader
from ._options import parse_read_options, parse_write_options
from ._reader import LiftbridgeReader
from ._schema import check_read_schema, read_schema
from ._values import Options, flag
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

    Read options: ``brokers`` (required); one of ``stream``, ``streams`` (comma-
    separated) or ``streamPattern`` (a regular expression over whole stream names);
    ``startingOffsets`` (``earliest`` / ``latest`` / ``{"stream": {"0": 12, "1": -2}}``,
    -2 earliest, -1 latest), ``startingTimestamp`` or ``startingOffsetsByTimestamp``
    (ms since the epoch, for all partitions or as JSON per partition);
    ``endingOffsets``, ``endingTimestamp``, ``endingOffsetsByTimestamp`` (batch only,
    exclusive); ``failOnDataLoss`` (default true); ``includeHeaders`` (default true);
    ``maxOffsetsPerSplit`` (default 100000), ``maxOffsetsPerTrigger`` (streaming);
    ``resumePaused`` (default true); ``timeout`` (s, default 10); TLS for gRPC:
    ``tls``, ``tls.ca``, ``tls.cert``, ``tls.key``, ``tls.serverName``.

    Write options: ``nats_url`` (required), ``stream`` (+ ``brokers``) or ``subject``,
    ``ack_policy`` (ALL (default), LEADER, NONE), ``ack_timeout`` (s, default 30),
    ``max_inflight`` (default 4096), ``timeout`` (s); NATS credentials: ``nats.user`` +
    ``nats.password``, ``nats.token``, ``nats.nkeySeedFile`` or ``nats.credsFile``, and
    ``nats.tls``, ``nats.tls.ca``, ``nats.tls.cert``, ``nats.tls.key``; the ``tls.*``
    options for the stream look-up over gRPC. Columns: ``value`` (binary or string,
    required), ``key``, ``headers`` (map), ``partition`` (int). Option names ignore
    case, underscores and dots.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``liftbridge``."""
        return "liftbridge"

    def schema(self) -> StructType:
        """stream, partition, offset, key, value, timestamp, subject, headers.

        Without ``headers`` when the option ``includeHeaders`` is false.
        """
        return read_schema(flag(Options(self.options), "includeHeaders", True) is not False)

    def reader(self, schema: StructType) -> DataSourceReader:
        """Batch reader over a snapshot planned now."""
        opts = parse_read_options(self.options, streaming=False)
        check_read_schema(schema, read_schema(opts.include_headers))
        return LiftbridgeReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Micro-batch reader with offsets in Spark's checkpoint."""
        opts = parse_read_options(self.options, streaming=True)
        check_read_schema(schema, read_schema(opts.include_headers))
        return LiftbridgeStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Batch sink; every task publishes with acks."""
        _append_only(overwrite)
        return LiftbridgeWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Streaming sink, at-least-once per micro-batch."""
        return LiftbridgeStreamWriter(parse_write_options(self.options), schema)
