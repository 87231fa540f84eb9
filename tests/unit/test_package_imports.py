"""What importing the package loads."""

from __future__ import annotations

import subprocess
import sys


def test_a_publishing_process_never_loads_grpc() -> None:
    code = (
        "import sys\n"
        "from liftbridge_nats import Ack, AckPolicy, Publisher, PublishRecord, envelope, wire\n"
        "assert 'grpc' not in sys.modules, 'the publisher pulled in grpc'\n"
        "from liftbridge_nats import Client\n"
        "assert 'grpc' in sys.modules and Client.__name__ == 'Client'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
