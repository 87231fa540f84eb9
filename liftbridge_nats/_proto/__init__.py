"""Protobuf and gRPC modules generated from proto/api.proto (private).

The schema lives in a descriptor pool of its own (``api_pb2.DESCRIPTOR.pool``), not in
protobuf's default pool: other Liftbridge clients in the same process (gufo-liftbridge,
stubs generated from liftbridge-api) register the same ``api.proto`` there. Names stay
the server's, so the gRPC paths are ``/proto.API/...``.
"""
