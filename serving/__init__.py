"""gRPC serving of :class:`nmt.translator.Translator`: validation, cross-request batching, lifecycle."""
