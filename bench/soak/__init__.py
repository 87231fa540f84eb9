"""A soak: a steady publish-and-read load for a long time, watching for anything that grows.

``python -m bench.soak`` (``make soak``) starts a LocalCluster, publishes at a fixed
offered rate through one :class:`~liftbridge_nats.Publisher` from several tasks, reads
the stream back with a subscription and a consumer-group member, and samples the
client's memory, file descriptors, tasks, pending acks, readers' backlogs, throughput
and ack latency once per interval. After the run, a least-squares line fitted to each
series after warm-up says how much it grew; the goal is at most 5%.

One job per module: ``stats`` (the arithmetic), ``probes`` (process readings),
``workload`` (the load, through the public API only), ``runner`` (servers, sampling,
analysis), ``report`` (JSON, chart, markdown), ``cli`` (the command line).
"""
