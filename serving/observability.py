"""One structured (JSON) log line per request and, when asked for, Prometheus metrics."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

request_logger = logging.getLogger("serving.requests")


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", ...fields}`` per line; fields come from ``extra={"fields": {...}}``."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)


@dataclass
class RequestRecord:
    """What the log line and the metrics say about one RPC; handlers fill it in as they learn more."""

    method: str
    peer: str
    code: str = grpc.StatusCode.OK.name
    texts: int = 0
    tokens: int = 0
    batch_requests: int = 0  # most requests decoded in one call with this one's texts
    started: float = field(default_factory=time.perf_counter)

    def decoded_with(self, batch_requests: int) -> None:
        self.batch_requests = max(self.batch_requests, batch_requests)


class Metrics:
    """Prometheus metrics in a registry of their own, so that several servers can share a process."""

    def __init__(self, queued: Callable[[], int]):
        self.registry = CollectorRegistry()
        self.requests = Counter("nmt_requests", "RPCs answered, by method and status code", ["method", "code"],
                                registry=self.registry)
        self.latency = Histogram("nmt_request_latency_seconds", "RPC latency", ["method"], registry=self.registry)
        self.batch_requests = Histogram("nmt_batch_requests", "Requests decoded together, seen from each request",
                                        buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=self.registry)
        self.texts = Counter("nmt_texts", "Texts translated", registry=self.registry)
        queue = Gauge("nmt_queued_requests", "Requests waiting for the decoder", registry=self.registry)
        queue.set_function(queued)
        self._http_server = None

    def serve(self, host: str, port: int) -> int:
        """Expose the metrics over HTTP; returns the bound port (useful with port 0)."""
        self._http_server, _ = start_http_server(port, addr=host, registry=self.registry)
        return self._http_server.server_port

    def stop(self) -> None:
        if self._http_server is not None:
            self._http_server.shutdown()
            self._http_server.server_close()

    def observe(self, record: RequestRecord, latency_s: float) -> None:
        self.requests.labels(record.method, record.code).inc()
        self.latency.labels(record.method).observe(latency_s)
        if record.batch_requests:
            self.batch_requests.observe(record.batch_requests)
            self.texts.inc(record.texts)


def log_request(record: RequestRecord, metrics: Metrics | None) -> None:
    latency_s = time.perf_counter() - record.started
    fields = {key: value for key, value in asdict(record).items() if key != "started"}
    request_logger.info("request", extra={"fields": {**fields, "latency_ms": round(latency_s * 1000, 2)}})
    if metrics is not None:
        metrics.observe(record, latency_s)
