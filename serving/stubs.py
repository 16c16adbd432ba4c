"""The generated protobuf and gRPC modules, with a pointer to ``make proto`` when they have not been generated."""

try:
    from serving.generated import translator_pb2, translator_pb2_grpc
except ImportError as error:
    raise ImportError("the gRPC stubs in serving/generated/ are missing or stale: run `make proto`") from error

SERVICE_NAME = translator_pb2.DESCRIPTOR.services_by_name["Translator"].full_name

__all__ = ["SERVICE_NAME", "translator_pb2", "translator_pb2_grpc"]
