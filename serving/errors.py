"""Why the server refuses a request, each reason tied to the gRPC status code the client receives."""

import grpc


class ServingError(Exception):
    """A refusal whose message is sent to the client as the status details."""

    code = grpc.StatusCode.INTERNAL


class InvalidRequest(ServingError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class Overloaded(ServingError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class RequestExpired(ServingError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class ShuttingDown(ServingError):
    code = grpc.StatusCode.UNAVAILABLE

    def __init__(self, message: str = "the server is shutting down; retry on another replica"):
        super().__init__(message)
