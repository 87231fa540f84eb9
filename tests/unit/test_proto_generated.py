"""The checked-in generated modules must match proto/api.proto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from liftbridge_nats._proto import api_pb2

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "proto" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_schema_keeps_the_server_field_numbers() -> None:
    fields = {f.name: f.number for f in api_pb2.Message.DESCRIPTOR.fields}
    assert fields == {
        "offset": 1,
        "key": 2,
        "value": 3,
        "timestamp": 4,
        "stream": 5,
        "partition": 6,
        "subject": 7,
        "replySubject": 8,
        "headers": 9,
        "ackInbox": 10,
        "correlationId": 11,
        "ackPolicy": 12,
    }
    service = api_pb2.DESCRIPTOR.services_by_name["API"]
    assert sorted(m.name for m in service.methods) == sorted(
        [
            "CreateStream",
            "DeleteStream",
            "PauseStream",
            "SetStreamReadonly",
            "Subscribe",
            "FetchMetadata",
            "FetchPartitionMetadata",
            "Publish",
            "PublishAsync",
            "PublishToSubject",
            "SetCursor",
            "FetchCursor",
            "JoinConsumerGroup",
            "LeaveConsumerGroup",
            "FetchConsumerGroupAssignments",
            "ReportConsumerGroupCoordinator",
        ]
    )
