"""Server benchmark: an async gRPC load generator against ``python -m serving.server``, batching on and off.

    python -m bench.serve --model models/default --dev runs/release/data/dev.jsonl      (make bench-serve)

For each precision and batching mode a fresh server process is started (``--torch-threads``, a free port); then, for each
concurrency level, ``--clients`` coroutines share a fixed number of ``Translate`` requests (one dev sentence
each, beam 4), each sending its next request as soon as its previous one is answered. We report requests/s,
latency percentiles and errors, and each level's throughput relative to one client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc

from bench.common import RESULTS_DIR, add_input_arguments, load_dev_set, machine, markdown_table, percentile, report
from nmt.precision import PRECISIONS
from serving.stubs import translator_pb2 as pb
from serving.stubs import translator_pb2_grpc

STARTUP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ServeConfig:
    model_dir: Path
    dev_path: Path
    corpus: str = "jhe-dev"
    source_lang: str = "ko"
    target_lang: str = "en"
    sentences: int = 500  # requests cycle through these
    requests: int = 256  # per concurrency level
    clients: tuple[int, ...] = (1, 8, 32)
    beam_size: int = 4
    threads: int = 2  # the server's torch threads
    precisions: tuple[str, ...] = ("fp32", "int8")  # the server's --precision, one server per value and batching mode
    warmup_requests: int = 8
    timeout_s: float = 300.0  # per request: a bound on a stuck server, not a latency target
    out: Path = RESULTS_DIR / "serve.json"


@dataclass
class LoadResult:
    precision: str
    batching: bool
    clients: int
    requests: int
    seconds: float
    latencies_s: list[float]  # of the answered requests
    errors: dict[str, int]  # status code name → count
    mean_batch: float  # requests per decode call, as each answered request saw it (the server's request log)

    @property
    def requests_per_s(self) -> float:
        return len(self.latencies_s) / self.seconds


@contextmanager
def running_server(config: ServeConfig, precision: str, batching: bool) -> Iterator[tuple[str, Path]]:
    """A server process on a free port; yields its address and log file, and stops it (SIGTERM, graceful) afterwards."""
    log_path = RESULTS_DIR / f"serve-{'batching' if batching else 'no-batching'}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "serving.server", "--model", str(config.model_dir), "--port", "0",
               "--device", "cpu", "--torch-threads", str(config.threads), "--precision", precision, *([] if batching else ["--no-batching"])]
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield f"127.0.0.1:{wait_for_port(process, log_path)}", log_path
    finally:
        process.terminate()
        process.wait(timeout=120)


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


async def generate_load(address: str, texts: list[str], config: ServeConfig, clients: int, requests: int) -> tuple[float, list[float], Counter]:
    """``clients`` coroutines share ``requests`` Translate calls; returns wall time, latencies and error codes."""
    options = pb.DecodingOptions(beam_size=config.beam_size)
    latencies: list[float] = []
    errors: Counter = Counter()
    next_request = iter(range(requests))
    async with grpc.aio.insecure_channel(address) as channel:
        stub = translator_pb2_grpc.TranslatorStub(channel)

        async def client() -> None:
            for index in next_request:  # one shared iterator: each request is taken by exactly one client
                request = pb.TranslateRequest(text=texts[index % len(texts)], source_lang=config.source_lang,
                                              target_lang=config.target_lang, options=options)
                started = time.perf_counter()
                try:
                    await stub.Translate(request, timeout=config.timeout_s)
                    latencies.append(time.perf_counter() - started)
                except grpc.aio.AioRpcError as error:
                    errors[error.code().name] += 1

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return time.perf_counter() - started, latencies, errors


def run(config: ServeConfig) -> dict:
    dev = load_dev_set(config.dev_path, config.corpus, config.source_lang, config.target_lang, config.sentences)
    results: list[LoadResult] = []
    for precision in config.precisions:
        for batching in (True, False):
            with running_server(config, precision, batching) as (address, log_path):
                asyncio.run(generate_load(address, dev.sources, config, 1, config.warmup_requests))
                for clients in config.clients:
                    logged = len(batch_sizes(log_path))
                    seconds, latencies, errors = asyncio.run(generate_load(address, dev.sources, config, clients, config.requests))
                    batches = batch_sizes(log_path)[logged:]  # every line is written before its answer is sent
                    results.append(LoadResult(precision, batching, clients, config.requests, seconds, latencies, dict(errors),
                                              sum(batches) / max(len(batches), 1)))
                    print(f"{precision}, batching {'on' if batching else 'off'}, {clients} clients: "
                          f"{results[-1].requests_per_s:.2f} requests/s", file=sys.stderr, flush=True)
    rows = []
    for result in results:
        single = next(r for r in results if (r.precision, r.batching) == (result.precision, result.batching)
                      and r.clients == min(config.clients))
        rows.append({
            "precision": result.precision, "batching": result.batching, "clients": result.clients, "requests": result.requests, "seconds": result.seconds,
            "requests_per_s": result.requests_per_s, "vs_one_client": result.requests_per_s / single.requests_per_s,
            **{f"p{q}_ms": percentile(result.latencies_s, q) * 1000 for q in (50, 95, 99)},
            "errors": sum(result.errors.values()), "error_codes": result.errors, "mean_batch": result.mean_batch,
        })
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}
    return {"benchmark": "serve", "machine": machine(), "config": settings, "results": rows}


def table(rows: list[dict]) -> str:
    headers = ["precision", "batching", "clients", "requests", "requests/s", "× 1 client", "p50 ms", "p95 ms", "p99 ms", "errors",
               "mean batch"]
    return markdown_table(headers, [
        [r["precision"], "on" if r["batching"] else "off", r["clients"], r["requests"], r["requests_per_s"], r["vs_one_client"],
         r["p50_ms"], r["p95_ms"], r["p99_ms"], r["errors"], r["mean_batch"]]
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
    parser.add_argument("--out", type=Path, default=defaults.out, help="JSON result file (default: %(default)s)")
    args = parser.parse_args(argv)
    return ServeConfig(args.model, args.dev, args.corpus, args.source_lang, args.target_lang, args.sentences, args.requests,
                       tuple(args.clients), args.beam_size, args.threads, tuple(args.precisions), out=args.out)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    results = run(config)
    return report(config.out, results, table(results["results"]))


if __name__ == "__main__":
    sys.exit(main())
