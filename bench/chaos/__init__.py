"""A randomized fault (nemesis) run against a 3-node ContainerCluster, and its checker.

``python -m bench.chaos`` (``make chaos``) starts the cluster, follows a seeded schedule
of faults while publishers and a consumer group work on an RF 3 stream, records every
publish outcome and every read to a history (JSON lines), reads the whole stream back
at the end, and checks the history: nothing acked lost (beyond the server's known
truncations, each shown with its log lines), nothing acked stored twice, no gap in the
offsets, per-key order kept, and every publish ended by its deadline with an ack or a
typed error. One job per module:

- ``schedule``: the seeded fault schedule and the rules it keeps (pure);
- ``history``: the events and their JSON-lines file;
- ``workload``: publishers and consumer-group members that record to the history;
- ``nemesis``: the faults themselves, on the ContainerCluster;
- ``checker``: the rules over a history (pure);
- ``report``: the figures (summary JSON and markdown);
- ``runner``: the run from start to clean-up; ``__main__``: its command line.
"""
