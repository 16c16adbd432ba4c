"""The gRPC translation server: ``python -m serving.server --model DIR [--host H] [--port P]`` (``make serve``).

The servicer validates requests and hands them to the :class:`~serving.batcher.Batcher`, whose worker thread
owns the model; the asyncio server only waits, so thousands of requests can be in flight at little cost.
Health (``grpc.health.v1.Health``) reports SERVING once the model is loaded and NOT_SERVING from the moment
SIGTERM/SIGINT arrives; then the server stops accepting RPCs, lets in-flight ones finish within the grace
period and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import grpc
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import SERVICE_NAME as HEALTH_SERVICE_NAME
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from nmt.budget import decoding_budget
from nmt.checkpoint import CheckpointError
from nmt.memory import limit_kernel_cache
from nmt.precision import PRECISIONS
from nmt.translator import Translator, resolve_device
from serving.batcher import Batcher, Decoded, Job
from serving.config import BatchingConfig, HttpConfig, Limits, ServerConfig
from serving.errors import ServingError
from serving.http import HttpApi
from serving.messages import batch_message, model_info_message, translation_message
from serving.observability import Metrics, RequestRecord, configure_logging, log_request
from serving.stubs import SERVICE_NAME, translator_pb2_grpc
from serving.threads import AdaptiveThreads
from serving.validation import RequestValidator

logger = logging.getLogger("serving.server")  # not __name__, which is __main__ under -m


class StartupError(RuntimeError):
    """The server cannot start; the message says why and what to do."""


class TranslatorServicer(translator_pb2_grpc.TranslatorServicer):
    def __init__(self, translator: Translator, batcher: Batcher, config: ServerConfig, metrics: Metrics | None):
        self.translator, self.batcher, self.config, self.metrics = translator, batcher, config, metrics
        self.validator = RequestValidator(translator, config.limits)

    async def Translate(self, request, context):
        async with self._rpc("Translate", context) as record:
            job = self.validator.translate_job(request)
            decoded = await self._result(self._submit(job, context, record), record)
            return translation_message(decoded.translations[0])

    async def TranslateBatch(self, request, context):
        async with self._rpc("TranslateBatch", context) as record:
            job = self.validator.batch_job(request)
            decoded = await self._result(self._submit(job, context, record), record)
            return batch_message(decoded.translations)

    async def TranslateStream(self, requests, context):
        async with self._rpc("TranslateStream", context) as record:
            window: asyncio.Queue[asyncio.Future[Decoded] | None] = asyncio.Queue(self.config.stream_window)
            reader = asyncio.create_task(self._submit_stream(requests, window, context, record))
            try:
                while (pending := await window.get()) is not None:
                    decoded = await self._result(pending, record)
                    yield translation_message(decoded.translations[0])
            finally:
                reader.cancel()
                while not window.empty():
                    if (abandoned := window.get_nowait()) is not None:
                        abandoned.cancel()

    async def GetModelInfo(self, request, context):
        async with self._rpc("GetModelInfo", context):
            return model_info_message(self.translator, self.config.limits)

    async def _submit_stream(self, requests, window: asyncio.Queue, context, record: RequestRecord) -> None:
        """Validate and queue stream requests as they arrive, so later ones decode while earlier ones are answered.

        A refusal goes into the window as a failed future: the answers before it are still sent in order.
        """
        try:
            index = 0
            async for request in requests:
                job = self.validator.translate_job(request, f"requests[{index}].text")
                pending = self._submit(job, context, record)
                index += 1
                try:
                    await window.put(pending)
                except asyncio.CancelledError:
                    pending.cancel()
                    raise
        except Exception as error:
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(error)
            await window.put(failed)
        else:
            await window.put(None)

    def _submit(self, job: Job, context, record: RequestRecord) -> asyncio.Future[Decoded]:
        """Queue a job; cancelling the returned future (the RPC ended) takes it out of the queue."""
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        record.texts += len(job.texts)
        record.tokens += job.tokens
        return asyncio.wrap_future(self.batcher.submit(job, deadline))

    @staticmethod
    async def _result(pending: asyncio.Future[Decoded], record: RequestRecord) -> Decoded:
        decoded = await pending
        record.decoded_with(decoded.batch_requests)
        return decoded

    @contextlib.asynccontextmanager
    async def _rpc(self, method: str, context) -> AsyncIterator[RequestRecord]:
        """Map refusals to status codes and write the request's log line, whatever the outcome.

        A refused request is logged before the refusal is sent: the abort answers the client, and the handler
        may not be resumed after that.
        """
        record, refusal = RequestRecord(method, context.peer()), None
        try:
            yield record
        except ServingError as error:
            record.code, refusal = error.code.name, (error.code, str(error))
        except asyncio.CancelledError:
            remaining = context.time_remaining()
            expired = remaining is not None and remaining <= 0
            record.code = (grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED).name
            raise
        except Exception:
            record.code = grpc.StatusCode.INTERNAL.name
            logger.exception("%s failed", method)
            refusal = (grpc.StatusCode.INTERNAL, "internal error; the server log has the details")
        finally:
            log_request(record, self.metrics)
        if refusal is not None:
            await context.abort(*refusal)


class TranslationServer:
    """The gRPC server, its health and reflection services, the HTTP API and the batcher, started and stopped together."""

    def __init__(self, config: ServerConfig, server: grpc.aio.Server, health: health_aio.HealthServicer,
                 batcher: Batcher, metrics: Metrics | None, port: int, metrics_port: int | None, http: HttpApi | None = None):
        self.config, self.server, self.health, self.batcher, self.metrics = config, server, health, batcher, metrics
        self.port, self.metrics_port, self.http = port, metrics_port, http

    @classmethod
    async def start(cls, config: ServerConfig, translator: Translator) -> TranslationServer:
        threads = None
        if config.adaptive_threads and translator.device.type == "cpu":
            threads = AdaptiveThreads(maximum=torch.get_num_threads())
        batcher = Batcher(translator, config.batching, threads=threads)
        metrics = Metrics(lambda: batcher.queued) if config.metrics_port is not None else None
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.max_receive_message_bytes),
                ("grpc.max_send_message_length", config.max_send_message_bytes),
                ("grpc.so_reuseport", 0),  # a port in use is an error, not a silently shared port
            ],
            maximum_concurrent_rpcs=config.max_concurrent_rpcs,
        )
        servicer = TranslatorServicer(translator, batcher, config, metrics)
        translator_pb2_grpc.add_TranslatorServicer_to_server(servicer, server)
        health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        await cls._set_health(health, health_pb2.HealthCheckResponse.NOT_SERVING)
        if config.reflection:
            reflection.enable_server_reflection([SERVICE_NAME, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME], server)
        port = cls._bind(server, config)
        metrics_port = cls._serve_metrics(metrics, config) if metrics is not None else None
        http = HttpApi(translator, batcher, servicer.validator, config, metrics) if config.http is not None else None
        if http is not None:
            await cls._serve_http(http, config)
        await server.start()
        batcher.start()
        await cls._set_health(health, health_pb2.HealthCheckResponse.SERVING)
        return cls(config, server, health, batcher, metrics, port, metrics_port, http)

    @staticmethod
    async def _set_health(health: health_aio.HealthServicer, status: health_pb2.HealthCheckResponse.ServingStatus) -> None:
        for service in ("", SERVICE_NAME):  # "" is the whole server
            await health.set(service, status)

    @staticmethod
    def _serve_metrics(metrics: Metrics, config: ServerConfig) -> int:
        try:
            return metrics.serve(config.host, config.metrics_port)
        except OSError as error:
            raise StartupError(f"cannot serve metrics on port {config.metrics_port}: {error}") from error

    @staticmethod
    async def _serve_http(http: HttpApi, config: ServerConfig) -> None:
        try:
            await http.start()
        except OSError as error:
            raise StartupError(f"cannot serve HTTP on {config.http.host}:{config.http.port}: {error}; choose another "
                               "port with --http-port (HTTP_PORT=... for make serve) or turn it off with --no-http") from error

    @staticmethod
    def _bind(server: grpc.aio.Server, config: ServerConfig) -> int:
        address = config.address
        try:
            if config.tls_cert is not None:
                key_and_cert = (config.tls_key.read_bytes(), config.tls_cert.read_bytes())
                return server.add_secure_port(address, grpc.ssl_server_credentials([key_and_cert]))
            return server.add_insecure_port(address)
        except OSError as error:
            raise StartupError(f"cannot read the TLS certificate or key: {error}") from error
        except RuntimeError as error:
            raise StartupError(f"cannot listen on {address}: the port is in use or the address is not "
                               "local; choose another with --port (PORT=... for make serve)") from error

    async def shutdown(self) -> None:
        """NOT_SERVING, stop accepting, finish in-flight requests within the grace period, stop the worker."""
        await self.health.enter_graceful_shutdown()
        if self.http is not None:
            self.http.drain()
            await asyncio.gather(self.server.stop(self.config.grace_period_s), self.http.stop())
        else:
            await self.server.stop(self.config.grace_period_s)
        await asyncio.to_thread(self.batcher.close)
        if self.metrics is not None:
            self.metrics.stop()


def load_translator(config: ServerConfig) -> Translator:
    """Load the model, failing with a message that says what to do when it cannot serve.

    The loading runs in a thread that then ends, taking its OpenMP thread pool with it: libgomp keeps one pool
    per thread that ever ran a parallel operator, and once the pools' workers outnumber the CPUs they stop
    spinning between operators and sleep, so every operator pays a wake-up. Loaded on the main thread, the
    model decoded at half speed in the batcher's thread on 2 CPUs (BENCHMARKS.md, "Server").
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="load-model") as loader:
        return loader.submit(_load_translator, config).result()


def _load_translator(config: ServerConfig) -> Translator:
    if not config.model_dir.is_dir():
        raise StartupError(f"no model at {config.model_dir}; train one (make train) "
                           "or pass --model DIR (MODEL=DIR for make serve)")
    try:
        overrides = {} if config.reconstruction_weight is None else {"reconstruction_weight": config.reconstruction_weight}
        translator = Translator.load(config.model_dir, config.device, max_batch_tokens=config.batching.max_batch_tokens,
                                     precision=config.precision, decoding_overrides=overrides)
    except (CheckpointError, ValueError) as error:
        raise StartupError(str(error)) from error
    if not translator.language_pairs:
        raise StartupError(f"the model in {config.model_dir} lists no language pairs in its metadata.json")
    for source, target in translator.language_pairs:
        if target not in translator.tokenizer.languages:
            raise StartupError(f"the model in {config.model_dir} lists {source}->{target} but has no decoder for "
                               f"{target}: its vocabulary has no <2{target}> tag (it has "
                               f"{', '.join(translator.tokenizer.languages)})")
    return translator


async def serve(config: ServerConfig, translator: Translator) -> int:
    """Serve until SIGTERM or SIGINT, then shut down gracefully; returns the exit status."""
    server = await TranslationServer.start(config, translator)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    pairs = [f"{s}->{t}" for s, t in translator.language_pairs]
    logger.info("serving", extra={"fields": {
        "address": replace(config, port=server.port).address, "port": server.port, "tls": config.tls_cert is not None,
        "metrics_port": server.metrics_port, "http_port": server.http.port if server.http else None, "language_pairs": pairs, "device": str(translator.device),
        "precision": translator.precision, "max_batch_tokens": config.batching.max_batch_tokens if config.batching.enabled else None,
    }})
    await stop.wait()
    draining = {"grace_period_s": config.grace_period_s, "queued": server.batcher.queued}
    logger.info("shutting down", extra={"fields": draining})
    await server.shutdown()
    logger.info("stopped")
    return 0


def parse_args(argv: list[str] | None = None) -> tuple[ServerConfig, str]:
    """The server configuration and the log level."""
    defaults, limits, batching, http = ServerConfig(), Limits(), BatchingConfig(), HttpConfig()
    parser = argparse.ArgumentParser(prog="python -m serving.server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=defaults.model_dir, help="model directory (default: %(default)s)")
    parser.add_argument("--host", default=defaults.host, help="address to bind (default: %(default)s, loopback only)")
    parser.add_argument("--port", type=int, default=defaults.port, help="port to bind, 0 for any free one (default: %(default)s)")
    parser.add_argument("--device", default=defaults.device, help="auto, cpu, cuda or cuda:N (default: %(default)s)")
    parser.add_argument("--precision", choices=PRECISIONS, default=defaults.precision,
                        help="decoding precision: int8 is fastest on CPUs, bf16 on AVX-512-BF16/AMX (default: %(default)s)")
    parser.add_argument("--torch-threads", type=int, help="CPU threads for decoding (default: torch's choice)")
    parser.add_argument("--fixed-threads", action="store_true",
                        help="always decode on --torch-threads threads; by default decoding uses fewer while other "
                             "processes keep CPUs busy (serving/threads.py)")
    parser.add_argument("--kernel-cache-capacity", type=int, default=defaults.kernel_cache_capacity,
                        help="oneDNN kernels (one per input shape) each of its two caches keeps; ONEDNN_PRIMITIVE_CACHE_CAPACITY "
                             "and LRU_CACHE_CAPACITY in the environment take precedence (default: %(default)s)")
    parser.add_argument("--tls-cert", type=Path, help="PEM certificate chain; with --tls-key the server speaks TLS only")
    parser.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    parser.add_argument("--grace-period", type=float, default=defaults.grace_period_s,
                        help="seconds in-flight requests get to finish on SIGTERM/SIGINT (default: %(default)s)")
    parser.add_argument("--no-reflection", action="store_true", help="do not serve gRPC server reflection")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics over HTTP on --host at this port")
    parser.add_argument("--http-host", default=http.host, help="address of the HTTP API and web page (default: %(default)s)")
    parser.add_argument("--http-port", type=int, default=http.port, help="port of the HTTP API and web page, 0 for any "
                        "free one (default: %(default)s)")
    parser.add_argument("--no-http", action="store_true", help="serve gRPC only: no HTTP API and no web page")
    parser.add_argument("--max-message-bytes", type=int, default=defaults.max_receive_message_bytes,
                        help="largest request accepted (default: %(default)s)")
    parser.add_argument("--max-text-chars", type=int, default=limits.max_text_chars, help="per text (default: %(default)s)")
    parser.add_argument("--max-text-tokens", type=int, default=limits.max_text_tokens,
                        help="per text, all sentences together (default: %(default)s)")
    parser.add_argument("--max-batch-texts", type=int, default=limits.max_batch_texts,
                        help="texts per TranslateBatch request (default: %(default)s)")
    parser.add_argument("--max-beam-size", type=int, default=limits.max_beam_size, help="(default: %(default)s)")
    parser.add_argument("--no-batching", action="store_true", help="decode every request on its own")
    parser.add_argument("--reconstruction-weight", type=float,
                        help="default weight of reranking the beam by back-translation, for requests that set none; "
                             "0 turns it off for more throughput (default: the model's)")
    parser.add_argument("--max-batch-tokens", type=int,
                        help="source tokens decoded together (default: the device's budget, 4096 on a CPU, 65536 on a GPU)")
    parser.add_argument("--max-queued-requests", type=int, default=batching.max_queued_requests,
                        help="queue bound; beyond it requests get RESOURCE_EXHAUSTED (default: %(default)s)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    args = parser.parse_args(argv)
    try:
        max_batch_tokens = args.max_batch_tokens
        if max_batch_tokens is None:
            max_batch_tokens = decoding_budget(resolve_device(args.device)).max_batch_tokens
        config = ServerConfig(
            model_dir=args.model, host=args.host, port=args.port, device=args.device, precision=args.precision,
            torch_threads=args.torch_threads, adaptive_threads=not args.fixed_threads,
            kernel_cache_capacity=args.kernel_cache_capacity,
            tls_cert=args.tls_cert, tls_key=args.tls_key, max_receive_message_bytes=args.max_message_bytes,
            grace_period_s=args.grace_period, reflection=not args.no_reflection, metrics_port=args.metrics_port,
            http=None if args.no_http else HttpConfig(args.http_host, args.http_port),
            limits=Limits(args.max_text_chars, args.max_text_tokens, args.max_batch_texts, args.max_beam_size),
            batching=BatchingConfig(not args.no_batching, max_batch_tokens, args.max_queued_requests),
            reconstruction_weight=args.reconstruction_weight,
        )
    except ValueError as error:
        parser.error(str(error))
    return config, args.log_level


def main(argv: list[str] | None = None) -> int:
    config, log_level = parse_args(argv)
    configure_logging(log_level)
    limit_kernel_cache(config.kernel_cache_capacity)  # before the model's weights are packed for oneDNN
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    try:
        return asyncio.run(serve(config, load_translator(config)))
    except StartupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
