"""Protobuf and gRPC modules generated from proto/api.proto (private)."""
