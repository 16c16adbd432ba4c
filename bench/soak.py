"""Soak test: drive a server for a fixed time with a mix of requests; fail on lost requests or memory that keeps growing.

    python -m bench.soak --model models/default --dev runs/release/data/dev.jsonl --minutes 20     (make soak)

``--clients`` coroutines send requests back to back until the time is up, cycling through the kinds of
:data:`KINDS`: short and long (several sentences) texts in both directions, n-best and attention requests,
requests the client cancels soon after sending them, and requests whose deadline is too short to meet. Every
``--window-s`` (a minute) we record the requests served, the errors by status code, the p50/p99 latency of
the answered requests and the server's resident memory (``VmRSS`` of ``/proc/PID/status``), sampled every
``--sample-s``: its value at the window's end and its peak within the window.

The run fails (exit status 1) if any request got no answer or an unexpected one (only a cancelled request
may end CANCELLED and only a deadline request DEADLINE_EXCEEDED), or if memory keeps growing after warm-up:
the least-squares slope of the windows' peak resident memory after ``--warmup-minutes`` is above
``--max-growth-mib-per-minute``. The peak, not a single sample per window: the server's memory rises and falls
within seconds with the batch it is decoding and with each release of freed buffers, so one sample a minute
lands anywhere in that cycle (tens of MiB apart) and the slope of 15 of them has a standard error above the
limit itself. The peak is what the server needed in that window, what an operator provisions for, and what a
leak raises. Results go to ``bench/results/soak.json``; requests go only to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.common import (RESULTS_DIR, json_config, load_dev_set, machine, markdown_table, percentile, rss_mib,
                          write_results)
from bench.serve import running_server
from serving.stubs import translator_pb2 as pb
from serving.stubs import translator_pb2_grpc

OK = "OK"
KINDS = ("short", "long", "en-ko", "nbest", "attention", "cancelled", "short", "deadline")
EXPECTED = {"cancelled": {OK, "CANCELLED"}, "deadline": {OK, "DEADLINE_EXCEEDED"}}  # any other kind: OK only


@dataclass(frozen=True)
class SoakConfig:
    model_dir: Path
    dev_path: Path
    corpus: str = "jhe-dev"
    sentences: int = 500
    minutes: float = 20.0
    clients: int = 16
    threads: int = 2  # the server's torch threads
    window_s: float = 60.0  # one report line per window
    sample_s: float = 1.0  # how often the server's resident memory is read
    warmup_minutes: float = 5.0  # memory may grow until then (caches, allocator pools)
    max_growth_mib_per_minute: float = 1.0
    request_timeout_s: float = 120.0  # a request not answered by then counts as lost
    cancel_after_s: float = 0.02
    deadline_s: float = 0.001
    out: Path = Path("bench/results/soak.json")  # kept in git, like the other results BENCHMARKS.md quotes


@dataclass(frozen=True)
class Outcome:
    kind: str
    code: str  # OK or a gRPC status code name
    finished_s: float  # since the start of the run
    latency_s: float


def unexpected(outcome: Outcome) -> bool:
    return outcome.code not in EXPECTED.get(outcome.kind, {OK})


def growth_mib_per_minute(samples: Sequence[tuple[float, float]], warmup_minutes: float) -> float | None:
    """Least-squares slope of (minute, MiB) samples after warm-up; None with fewer than three such samples."""
    after = [(x, y) for x, y in samples if x >= warmup_minutes]
    if len(after) < 3:
        return None
    mean_x, mean_y = sum(x for x, _ in after) / len(after), sum(y for _, y in after) / len(after)
    spread = sum((x - mean_x) ** 2 for x, _ in after)
    return sum((x - mean_x) * (y - mean_y) for x, y in after) / spread if spread else 0.0


def windows(outcomes: Sequence[Outcome], ends: Sequence[float], rss: Sequence[tuple[float, float]]) -> list[dict]:
    """Per window, from one of ``ends`` (seconds) to the next (the first from the start of the run): requests
    served, errors by code, p50/p99 of the answered ones, and of the (seconds, MiB) ``rss`` samples, the last
    one by its end and the highest within it."""
    rows = []
    for start_s, end_s in zip([0.0, *ends], ends):
        inside = [o for o in outcomes if start_s <= o.finished_s < end_s]
        answered = [o.latency_s for o in inside if o.code == OK]
        memory = [mib for s, mib in rss if s <= end_s]
        peak = max((mib for s, mib in rss if start_s < s <= end_s), default=memory[-1])
        rows.append({"minute": end_s / 60, "served": len(answered),
                     "errors": dict(Counter(o.code for o in inside if o.code != OK)),
                     "p50_ms": percentile(answered, 50) * 1000, "p99_ms": percentile(answered, 99) * 1000,
                     "rss_mib": memory[-1], "rss_peak_mib": peak})
    return rows


def verdict(issued: int, outcomes: Sequence[Outcome], growth: float | None, config: SoakConfig) -> list[str]:
    """Why the run fails; empty when it passes."""
    failures = []
    if issued != len(outcomes):
        failures.append(f"{issued - len(outcomes)} requests never finished")
    lost = Counter(f"{o.kind}: {o.code}" for o in outcomes if unexpected(o))
    if lost:
        failures.append(f"unexpected answers: {dict(lost)}")
    if growth is not None and growth > config.max_growth_mib_per_minute:
        failures.append(f"memory grows {growth:.2f} MiB/minute after warm-up (limit {config.max_growth_mib_per_minute})")
    return failures


def make_request(kind: str, index: int, sources: Sequence[str], targets: Sequence[str]) -> pb.TranslateRequest:
    text = sources[index % len(sources)]
    if kind == "long":
        return pb.TranslateRequest(text=" ".join(sources[index % len(sources) : index % len(sources) + 6]), source_lang="ko",
                                   target_lang="en")
    if kind == "en-ko":
        return pb.TranslateRequest(text=targets[index % len(targets)], source_lang="en", target_lang="ko")
    options = {"nbest": pb.DecodingOptions(beam_size=4, nbest=3), "attention": pb.DecodingOptions(return_attention=True)}
    return pb.TranslateRequest(text=text, source_lang="ko", target_lang="en", options=options.get(kind))


async def drive(address: str, pid: int, sources: Sequence[str], targets: Sequence[str], config: SoakConfig) -> dict:
    outcomes: list[Outcome] = []
    rss: list[tuple[float, float]] = []  # (seconds, MiB), every sample_s
    ends: list[float] = []  # of the windows so far, in seconds
    counter, started = itertools.count(), time.monotonic()
    end = started + config.minutes * 60
    issued = 0
    async with grpc.aio.insecure_channel(address) as channel:
        stub = translator_pb2_grpc.TranslatorStub(channel)

        async def client() -> None:
            nonlocal issued
            while time.monotonic() < end:
                index = next(counter)
                kind = KINDS[index % len(KINDS)]
                timeout = config.deadline_s if kind == "deadline" else config.request_timeout_s
                sent = time.monotonic()
                call = stub.Translate(make_request(kind, index, sources, targets), timeout=timeout)
                issued += 1
                if kind == "cancelled":
                    await asyncio.sleep(config.cancel_after_s)
                    call.cancel()
                try:
                    await call
                    code = OK
                except asyncio.CancelledError:
                    code = "CANCELLED"
                except grpc.aio.AioRpcError as error:
                    code = error.code().name
                now = time.monotonic()
                outcomes.append(Outcome(kind, code, now - started, now - sent))

        async def sample_memory() -> None:
            next_end = config.window_s
            while (now := time.monotonic()) < end:
                await asyncio.sleep(min(config.sample_s, end - now))
                rss.append((seconds := time.monotonic() - started, rss_mib(pid)))
                if seconds >= next_end or time.monotonic() >= end:
                    ends.append(seconds)
                    next_end += config.window_s
                    row = windows(outcomes, ends, rss)[-1]
                    print(f"minute {row['minute']:.1f}: {row['served']} served, errors {row['errors']}, p50 {row['p50_ms']:.0f} ms, "
                          f"p99 {row['p99_ms']:.0f} ms, RSS {row['rss_mib']:.0f} MiB (peak {row['rss_peak_mib']:.0f})",
                          file=sys.stderr, flush=True)

        rss.append((0.0, rss_mib(pid)))
        await asyncio.gather(sample_memory(), *(client() for _ in range(config.clients)))
        rss.append((seconds := time.monotonic() - started, rss_mib(pid)))  # the requests in flight at the end finish first
        ends.append(seconds)
    rows = windows(outcomes, ends, rss)
    growth = growth_mib_per_minute([(row["minute"], row["rss_peak_mib"]) for row in rows], config.warmup_minutes)
    failures = verdict(issued, outcomes, growth, config)
    return {
        "requests": issued, "outcomes": dict(Counter(f"{o.kind}: {o.code}" for o in outcomes)),
        "rss_mib_start": rss[0][1], "rss_mib_end": rss[-1][1], "growth_mib_per_minute_after_warmup": growth,
        "windows": rows, "failures": failures, "passed": not failures,
    }


def run(config: SoakConfig) -> dict:
    dev = load_dev_set(config.dev_path, config.corpus, "ko", "en", config.sentences)
    log_path = RESULTS_DIR / "soak-server.log"
    with running_server(config.model_dir, log_path, "--torch-threads", str(config.threads)) as (address, process):
        result = asyncio.run(drive(address, process.pid, dev.sources, dev.references, config))
    return {"benchmark": "soak", "machine": machine(), "config": json_config(config), **result}


def table(rows: list[dict]) -> str:
    return markdown_table(["minute", "served", "errors", "p50 ms", "p99 ms", "RSS MiB", "peak RSS MiB"], [
        [row["minute"], row["served"], ", ".join(f"{code} {n}" for code, n in sorted(row["errors"].items())) or "—",
         row["p50_ms"], row["p99_ms"], row["rss_mib"], row["rss_peak_mib"]] for row in rows
    ])


def parse_args(argv: list[str] | None = None) -> SoakConfig:
    defaults = SoakConfig(Path("models/default"), Path("runs/release/data/dev.jsonl"))
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=defaults.model_dir)
    parser.add_argument("--dev", type=Path, default=defaults.dev_path, help="prepared dev set (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="(default: %(default)s)")
    parser.add_argument("--clients", type=int, default=defaults.clients, help="(default: %(default)s)")
    parser.add_argument("--threads", type=int, default=defaults.threads, help="the server's torch threads")
    parser.add_argument("--window-s", type=float, default=defaults.window_s, help="seconds per report line (default: %(default)s)")
    parser.add_argument("--sample-s", type=float, default=defaults.sample_s, help="seconds between memory samples (default: %(default)s)")
    parser.add_argument("--warmup-minutes", type=float, default=defaults.warmup_minutes, help="(default: %(default)s)")
    parser.add_argument("--max-growth-mib-per-minute", type=float, default=defaults.max_growth_mib_per_minute,
                        help="memory slope after warm-up that fails the run (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=defaults.out, help="JSON result file (default: %(default)s)")
    args = parser.parse_args(argv)
    return SoakConfig(args.model, args.dev, minutes=args.minutes, clients=args.clients, threads=args.threads,
                      window_s=args.window_s, sample_s=args.sample_s, warmup_minutes=args.warmup_minutes,
                      max_growth_mib_per_minute=args.max_growth_mib_per_minute, out=args.out)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    results = run(config)
    write_results(config.out, results)
    print(table(results["windows"]))
    print(f"\nresults: {config.out}")
    for failure in results["failures"]:
        print(f"FAIL: {failure}")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
