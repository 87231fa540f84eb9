"""Fault-injection tests against real servers (issue #6)."""
