"""Server benchmark: an async gRPC load generator against ``python -m serving.server``, quiet and beside a noisy neighbour.

    python -m bench.serve --model models/default --dev runs/release/data/dev.jsonl      (make bench-serve)
    python -m bench.serve ... --noisy-neighbour --precisions fp32 --batching on           (make bench-serve NOISY=1)

For each precision and batching mode a fresh server process is started (``--torch-threads``, a free port); then, for each
concurrency level, ``--clients`` coroutines share a fixed number of ``Translate`` requests (one dev sentence
each, beam 4), each sending its next request as soon as its previous one is answered. We report requests/s,
latency percentiles (all requests, and the shorter and the longer half of the sentences apart) and errors, and
each level's throughput relative to one client. ``--noisy-neighbour`` measures every level twice: on a quiet
machine, then beside a CPU-bound process of our own (a busy loop pinned to the last CPU the server may use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.common import (RESULTS_DIR, BenchInput, add_input_arguments, json_config, load_dev_set, machine, markdown_table,
                          percentile, report)
from nmt.precision import PRECISIONS
from serving.stubs import translator_pb2 as pb
from serving.stubs import translator_pb2_grpc

STARTUP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ServeConfig(BenchInput):  # requests cycle through the `sentences` first ones of the dev set
    requests: int = 256  # per concurrency level
    clients: tuple[int, ...] = (1, 16, 32)
    beam_size: int = 4
    threads: int = 2  # the server's torch threads
    precisions: tuple[str, ...] = ("fp32", "int8")  # the server's --precision, one server per value and batching mode
    batching: tuple[bool, ...] = (True, False)
    noisy_neighbour: bool = False  # measure each level quiet and beside a busy loop on one CPU
    fixed_threads: bool = False  # the server's --fixed-threads: no adapting to other processes (for A/B runs)
    max_batch_tokens: int | None = None  # the server's --max-batch-tokens; None leaves the device's default
    warmup_requests: int = 8
    timeout_s: float = 300.0  # per request: a bound on a stuck server, not a latency target
    out: Path = RESULTS_DIR / "serve.json"


@dataclass
class Load:
    """What a load generator saw: per answered request its latency and whether it was long, errors by code."""

    latencies_s: list[float] = field(default_factory=list)
    long: list[bool] = field(default_factory=list)  # per answered request: its sentence is among the longer half
    errors: Counter = field(default_factory=Counter)  # status code name → count
    seconds: float = 0.0

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies_s) / self.seconds

    def latency_ms(self, q: float, long: bool | None = None) -> float:
        """The q-th latency percentile of all requests, or of the short (long=False) or long ones."""
        return percentile([s for s, is_long in zip(self.latencies_s, self.long) if long in (None, is_long)], q) * 1000


@dataclass
class LoadResult:
    precision: str
    batching: bool
    neighbour: str  # "quiet" or "noisy"
    clients: int
    requests: int
    load: Load
    mean_batch: float  # the most requests decoded alongside each answered one, averaged (the server's request log)


@contextmanager
def running_server(model_dir: Path, log_path: Path, *arguments: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """A server process on a free port; yields its address and process, and stops it (SIGTERM, graceful) afterwards."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "serving.server", "--model", str(model_dir), "--port", "0", "--no-http", "--device", "cpu",
               *arguments]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield f"127.0.0.1:{wait_for_port(process, log_path)}", process
    finally:
        process.terminate()
        process.wait(timeout=120)


@contextmanager
def noisy_neighbour() -> Iterator[subprocess.Popen]:
    """A CPU-bound process beside the server: a busy loop, pinned to the last CPU we may use where affinity is allowed."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(process.pid, {max(os.sched_getaffinity(0))})
        yield process
    finally:
        process.kill()
        process.wait()


def batch_sizes(log_path: Path) -> list[int]:
    """``batch_requests`` of every request the server has logged so far, in order (one JSON line each)."""
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    return [line["batch_requests"] for line in lines if "batch_requests" in line]


def wait_for_port(process: subprocess.Popen, log_path: Path) -> int:
    """The port from the server's ``serving`` log line, which it writes once it answers requests."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in log_path.read_text().splitlines():
            if line.startswith("{") and json.loads(line).get("message") == "serving":
                return int(json.loads(line)["port"])
        if process.poll() is not None:
            raise SystemExit(f"error: the server exited with {process.returncode}:\n{log_path.read_text()}")
        time.sleep(0.1)
    raise SystemExit(f"error: the server did not start within {STARTUP_TIMEOUT_S:.0f}s; see {log_path}")


async def generate_load(address: str, texts: Sequence[str], config: ServeConfig, clients: int, requests: int) -> Load:
    """``clients`` coroutines share ``requests`` Translate calls."""
    options = pb.DecodingOptions(beam_size=config.beam_size)
    longer_than = statistics.median(len(text) for text in texts)
    load = Load()
    next_request = iter(range(requests))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = translator_pb2_grpc.TranslatorStub(channel)

        async def client() -> None:
            for index in next_request:  # one shared iterator: each request is taken by exactly one client
                text = texts[index % len(texts)]
                request = pb.TranslateRequest(text=text, source_lang=config.source_lang, target_lang=config.target_lang,
                                              options=options)
                started = time.perf_counter()
                try:
                    await stub.Translate(request, timeout=config.timeout_s)
                    load.latencies_s.append(time.perf_counter() - started)
                    load.long.append(len(text) > longer_than)
                except grpc.aio.AioRpcError as error:
                    load.errors[error.code().name] += 1

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        load.seconds = time.perf_counter() - started
        return load


def measure(config: ServeConfig, texts: list[str], precision: str, batching: bool) -> list[LoadResult]:
    """One server; every concurrency level, quiet and (with ``noisy_neighbour``) beside the busy loop."""
    results = []
    log_path = config.out.with_name(f"{config.out.stem}-{precision}-{'batching' if batching else 'no-batching'}.log")
    arguments = ["--torch-threads", str(config.threads), "--precision", precision, *([] if batching else ["--no-batching"]),
                 *(["--fixed-threads"] if config.fixed_threads else []),
                 *([] if config.max_batch_tokens is None else ["--max-batch-tokens", str(config.max_batch_tokens)])]
    with running_server(config.model_dir, log_path, *arguments) as (address, _):
        asyncio.run(generate_load(address, texts, config, 1, config.warmup_requests))
        for neighbour in ("quiet", "noisy") if config.noisy_neighbour else ("quiet",):
            with noisy_neighbour() if neighbour == "noisy" else nullcontext():
                for clients in config.clients:
                    logged = len(batch_sizes(log_path))
                    load = asyncio.run(generate_load(address, texts, config, clients, config.requests))
                    batches = batch_sizes(log_path)[logged:]  # every line is written before its answer is sent
                    results.append(LoadResult(precision, batching, neighbour, clients, config.requests, load,
                                              sum(batches) / max(len(batches), 1)))
                    print(f"{precision}, batching {'on' if batching else 'off'}, {neighbour}, {clients} clients: "
                          f"{load.requests_per_s:.2f} requests/s", file=sys.stderr, flush=True)
    return results


def run(config: ServeConfig) -> dict:
    dev = load_dev_set(config.dev_path, config.corpus, config.source_lang, config.target_lang, config.sentences)
    results = [result for precision in config.precisions for batching in config.batching
               for result in measure(config, dev.sources, precision, batching)]
    rows = []
    for result in results:
        load = result.load
        same_server = [r for r in results if (r.precision, r.batching) == (result.precision, result.batching)]
        single = next(r for r in same_server if r.neighbour == result.neighbour and r.clients == min(config.clients))
        quiet = next(r for r in same_server if r.neighbour == "quiet" and r.clients == result.clients)
        rows.append({
            "precision": result.precision, "batching": result.batching, "neighbour": result.neighbour, "clients": result.clients,
            "requests": result.requests, "seconds": load.seconds, "requests_per_s": load.requests_per_s,
            "vs_one_client": load.requests_per_s / single.load.requests_per_s,
            "vs_quiet": load.requests_per_s / quiet.load.requests_per_s,
            **{f"p{q}_ms": load.latency_ms(q) for q in (50, 95, 99)},
            **{f"{kind}_p{q}_ms": load.latency_ms(q, kind == "long") for kind in ("short", "long") for q in (50, 99)},
            "errors": sum(load.errors.values()), "error_codes": dict(load.errors), "mean_batch": result.mean_batch,
        })
    return {"benchmark": "serve", "machine": machine(), "config": json_config(config), "results": rows}


def table(rows: list[dict]) -> str:
    headers = ["precision", "batching", "neighbour", "clients", "requests/s", "× 1 client", "× quiet", "p50 ms", "p99 ms",
               "short p50", "short p99", "long p50", "long p99", "errors", "mean batch"]
    return markdown_table(headers, [
        [r["precision"], "on" if r["batching"] else "off", r["neighbour"], r["clients"], r["requests_per_s"], r["vs_one_client"],
         r["vs_quiet"], r["p50_ms"], r["p99_ms"], r["short_p50_ms"], r["short_p99_ms"], r["long_p50_ms"], r["long_p99_ms"],
         r["errors"], r["mean_batch"]]
        for r in rows
    ])


def parse_args(argv: list[str] | None = None) -> ServeConfig:
    defaults = ServeConfig(Path("models/default"), Path("runs/release/data/dev.jsonl"))
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(parser, defaults)
    parser.add_argument("--requests", type=int, default=defaults.requests, help="per concurrency level (default: %(default)s)")
    parser.add_argument("--clients", type=int, nargs="+", default=list(defaults.clients))
    parser.add_argument("--beam-size", type=int, default=defaults.beam_size)
    parser.add_argument("--threads", type=int, default=defaults.threads, help="the server's torch threads")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(defaults.precisions),
                        help="the server's --precision, one run each (default: %(default)s)")
    parser.add_argument("--batching", nargs="+", choices=["on", "off"], default=["on", "off"],
                        help="the server's batching, one run each (default: %(default)s)")
    parser.add_argument("--noisy-neighbour", action="store_true",
                        help="measure every level twice: quiet, and beside a busy loop pinned to one CPU")
    parser.add_argument("--fixed-threads", action="store_true", help="pass --fixed-threads to the server (the old policy)")
    parser.add_argument("--max-batch-tokens", type=int, help="the server's --max-batch-tokens (default: the device's budget)")
    parser.add_argument("--out", type=Path, default=defaults.out, help="JSON result file (default: %(default)s)")
    args = parser.parse_args(argv)
    return ServeConfig(args.model, args.dev, args.corpus, args.source_lang, args.target_lang, args.sentences, args.requests,
                       tuple(args.clients), args.beam_size, args.threads, tuple(args.precisions),
                       tuple(mode == "on" for mode in args.batching), args.noisy_neighbour, args.fixed_threads,
                       args.max_batch_tokens, out=args.out)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    results = run(config)
    return report(config.out, results, table(results["results"]))


if __name__ == "__main__":
    sys.exit(main())
