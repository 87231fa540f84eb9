"""Fault-injection tests against real servers."""
