"""Everything an operator can tune about the server, in one place; ``python -m serving.server --help`` maps flags onto it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nmt.precision import PRECISIONS
from nmt.search import SearchOptions
from nmt.translator import DEFAULT_MODEL_DIR

MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; beyond it the request is refused with INVALID_ARGUMENT."""

    max_text_chars: int = 5000
    max_text_tokens: int = 1024  # all sentences of one text together
    max_batch_texts: int = 64
    max_beam_size: int = 8

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")


@dataclass(frozen=True)
class BatchingConfig:
    """Cross-request batching at the decoding step (serving.batcher): how big a running search may grow."""

    enabled: bool = True  # off: every request is decoded on its own
    max_batch_tokens: int = 4096  # longest source × sentences × beam of a running search; more requests wait queued
    max_queued_requests: int = 256  # beyond this, requests are refused with RESOURCE_EXHAUSTED
    trim_interval_s: float = 10.0  # hand freed search buffers back to the OS this often, between steps

    def __post_init__(self) -> None:
        if self.max_batch_tokens < 1 or self.max_queued_requests < 1:
            raise ValueError("max_batch_tokens and max_queued_requests must be at least 1")
        if self.trim_interval_s < 0:
            raise ValueError("trim_interval_s must be at least 0")


@dataclass(frozen=True)
class HttpConfig:
    """The HTTP/JSON API and web page, served beside gRPC on the same event loop (serving.http)."""

    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8080  # 0 picks a free port
    max_explain_tokens: int = 256  # per explained text: its maps grow with the square of its length
    max_queued_explains: int = 8  # explain requests waiting or running; beyond it they get 429

    def __post_init__(self) -> None:
        if self.max_explain_tokens < 1 or self.max_queued_explains < 1:
            raise ValueError("max_explain_tokens and max_queued_explains must be at least 1")


@dataclass(frozen=True)
class ServerConfig:
    model_dir: Path = DEFAULT_MODEL_DIR
    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 50051  # 0 picks a free port
    device: str = "auto"
    precision: str = "fp32"  # fp32, bf16 or int8: how the decoding copy of the model multiplies (nmt.precision)
    torch_threads: int | None = None  # None leaves torch's default
    adaptive_threads: bool = True  # on a CPU, decode on the CPUs other processes leave free, at most torch_threads
    kernel_cache_capacity: int = 64  # oneDNN kernels kept per cache, one per shape (nmt.memory); the environment's wins
    tls_cert: Path | None = None  # PEM certificate chain; with tls_key, serve TLS only
    tls_key: Path | None = None
    max_receive_message_bytes: int = 4 * MIB
    max_send_message_bytes: int = 64 * MIB  # attention matrices of long texts are large
    max_concurrent_rpcs: int = 1024  # streams and health watches included
    stream_window: int = 32  # stream requests queued ahead of the one being answered
    grace_period_s: float = 30.0  # on SIGTERM/SIGINT, in-flight requests get this long to finish
    reflection: bool = True
    metrics_port: int | None = None  # serve Prometheus metrics over HTTP on host:metrics_port
    limits: Limits = field(default_factory=Limits)
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    http: HttpConfig | None = None  # the HTTP API and web page; None serves gRPC only (the command serves both)
    # every pair's default reranking weight (nmt.rerank), for requests that set none; None keeps the model's, and 0
    # trades the model's tuned quality for throughput
    reconstruction_weight: float | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both a certificate and a key (--tls-cert and --tls-key)")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.stream_window < 1 or self.max_concurrent_rpcs < 1:
            raise ValueError("stream_window and max_concurrent_rpcs must be at least 1")
        if self.grace_period_s < 0:
            raise ValueError(f"grace_period_s must be ≥ 0, got {self.grace_period_s}")
        if self.reconstruction_weight is not None:
            SearchOptions(reconstruction_weight=self.reconstruction_weight)  # its check: finite and ≥ 0
        if self.kernel_cache_capacity < 1:  # ideep crashes with an empty cache
            raise ValueError(f"kernel_cache_capacity must be at least 1, got {self.kernel_cache_capacity}")

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"
