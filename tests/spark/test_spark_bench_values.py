"""The benchmark's Publishers publish the values the Spark sink writes, row for row."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from bench.spark import _values, row_values

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(("rows", "size"), [(1_200, 100), (120, 2)])
def test_the_publishers_values_are_the_sink_s_rows(
    spark: SparkSession, rows: int, size: int
) -> None:
    df = _values(spark, rows, size, tasks=2)
    try:
        written = [bytes(r.value) for r in df.orderBy("value").collect()]
    finally:
        df.unpersist()
    assert sorted(written) == sorted(row_values(0, rows, size))
    assert row_values(1_000, 2, 6) == [b"xx1000", b"xx1001"]
