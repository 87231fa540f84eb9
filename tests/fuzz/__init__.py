"""Fuzzing of the wire decoders: short runs in the test suite, long runs from ``run.py``."""
