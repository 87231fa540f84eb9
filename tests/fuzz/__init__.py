"""Fuzzing and property tests: the wire decoders (long runs from ``run.py``) and the
input guards against a real 3-node cluster (long runs from ``guards.py``); short runs of
both are part of the test suite."""
