"""liftbridge-nats benchmark suite: ``python -m bench`` or ``make bench``.

One run starts its own LocalCluster and measures, side by side on the same servers with
the same payloads and counts: acked publish throughput (our Publisher, the bare pipeline
that is the ceiling, raw nats-py with no server in the loop, gufo-liftbridge, the
official Go client), ack latency at fixed offered loads, subscribe throughput, client
CPU per message and peak memory. Every client runs in its own process (a worker), so CPU
time and memory belong to that client alone.
The orchestrator (``runner``) only starts servers, creates streams, runs workers and
writes the report; it asserts nothing about speed.
"""
