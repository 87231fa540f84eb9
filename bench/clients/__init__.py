"""One module per measured client; each exposes async actions taking a spec dict.

``ours`` (the SDK), ``bare`` (pre-encoded envelopes on nats-py: the ceiling, and raw
nats-py with no server in the loop), ``gufo`` (gufo-liftbridge). The Go peer is a
separate program (bench/go) that the runner starts directly.
"""
