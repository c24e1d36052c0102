"""kvtier.v1: the daemon's gRPC contract (proto/kvtier/v1/*.proto), generated when the package
was built: one <name>_pb2 module per .proto file (the messages, with .pyi stubs) and
service_pb2_grpc (KvTierStub). Importing them needs protobuf, and the stub grpcio:
pip install 'kvtier[grpc]' (Debian: python3-protobuf, python3-grpcio)."""
