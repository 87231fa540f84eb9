"""PySpark data source ``liftbridge``: batch and streaming reads and writes.

A thin adapter over the public SDK and nothing else (no protobuf, no envelopes):
reads go through the gRPC :class:`~liftbridge_nats.Client` (Subscribe bounded
by offsets planned on the driver), writes through the NATS-native
:class:`~liftbridge_nats.Publisher` with acks. Every Spark callback that
talks to Liftbridge runs on one background event loop per Python process, where the
connections stay open across tasks and micro-batches until the process exits. The options follow Spark's Kafka
source (several streams by list or pattern, offsets and times to start and end at,
``failOnDataLoss``, ``includeHeaders``, TLS and NATS credentials); the Spark guide
(docs/spark.md) has them in one table beside Kafka's. In short::

    from liftbridge_nats.spark import LiftbridgeDataSource
    spark.dataSource.register(LiftbridgeDataSource)
    df = spark.read.format("liftbridge").option("brokers", "h:9292").option("stream", "orders").load()
"""

from __future__ import annotations

from ._dataloss import DataLossError
from ._source import LiftbridgeDataSource
from ._writer import LiftbridgeCommitMessage, PartitionOffsets

__all__ = [
    "DataLossError",
    "LiftbridgeCommitMessage",
    "LiftbridgeDataSource",
    "PartitionOffsets",
]
