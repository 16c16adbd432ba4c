"""What every benchmark shares: the machine description, isolated runs, medians, result files and tables."""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, is_dataclass
from importlib import metadata
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

RESULTS_DIR = Path(".bench")  # ignored by git; BENCHMARKS.md quotes the tables
T = TypeVar("T")


@dataclass(frozen=True)
class DevSet:
    """A fixed slice of a prepared dev set (``runs/NAME/data/dev.jsonl``): sources and their references."""

    sources: list[str]
    references: list[str]
    source_lang: str
    target_lang: str
    corpus: str


@dataclass(frozen=True)
class BenchInput:
    """What a decoding benchmark reads (the flags of :func:`add_input_arguments`): a model and a dev-set slice."""

    model_dir: Path
    dev_path: Path
    corpus: str = "jhe-dev"
    source_lang: str = "ko"
    target_lang: str = "en"
    sentences: int = 500


def load_dev_set(path: Path, corpus: str, source_lang: str, target_lang: str, limit: int) -> DevSet:
    """The first ``limit`` pairs of one corpus and direction, in file order (the same slice every time)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if (row["corpus"], row["source_lang"], row["target_lang"]) == (corpus, source_lang, target_lang):
            rows.append(row)
            if len(rows) == limit:
                break
    if not rows:
        raise SystemExit(f"error: {path} has no {corpus} {source_lang}->{target_lang} pairs; run make data first")
    return DevSet([r["source"] for r in rows], [r["target"] for r in rows], source_lang, target_lang, corpus)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def gpu(device: str = "cuda") -> dict[str, Any]:
    """The GPU's model, memory, CUDA version and driver, for results measured on it."""
    import torch

    properties = torch.cuda.get_device_properties(device)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30, check=True).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        driver = None
    return {"name": properties.name, "memory_gib": round(properties.total_memory / 2**30, 1), "cuda": torch.version.cuda,
            "driver": driver, "capability": ".".join(map(str, torch.cuda.get_device_capability(device)))}


def synchronize(device: Any) -> None:
    """Wait for the device's queued work: GPU timings must end when the GPU is done, not when the host is."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def resolve_bench_device(name: str) -> str:
    """``auto``: CUDA when present; a clear exit when CUDA is asked for and missing."""
    from nmt.translator import resolve_device

    try:
        return str(resolve_device(name))
    except ValueError as error:
        raise SystemExit(f"error: {error}") from error


def machine(device: str = "cpu") -> dict[str, Any]:
    """Enough about the machine and software to judge whether two result files are comparable."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return {
        **({"gpu": gpu(device)} if device.startswith("cuda") else {}),
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "isa": [isa for isa in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile") if f" {isa}" in flags],
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "load_average_1m": os.getloadavg()[0],  # other work on the machine while measuring
        "python": platform.python_version(),
        "packages": {name: package_version(name) for name in ("torch", "transformers", "ctranslate2", "grpcio")},
    }


def peak_rss_mib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib(pid: int | str = "self") -> float:
    """A process's resident memory now (``VmRSS``), not its peak."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation, as numpy's default."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def run_isolated(function: Callable[..., T], *args: Any) -> T:
    """Run ``function(*args)`` in a fresh process: its own peak RSS, thread settings and imports."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
        return "—" if value is None else str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def json_config(config: Any) -> dict[str, Any]:
    """A benchmark's config (a dataclass or parsed arguments) as JSON-ready values (paths as strings), for its
    results file."""
    values = asdict(config) if is_dataclass(config) else vars(config)
    return {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}


def write_results(path: Path, results: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def report(path: Path, results: dict[str, Any], table: str) -> int:
    """The end of every benchmark command: JSON results to ``path``, the markdown table and its location printed."""
    write_results(path, results)
    print(table)
    print(f"\nresults: {path}")
    return 0


def add_input_arguments(parser: argparse.ArgumentParser, defaults: Any) -> None:
    """The model and dev-set flags that the decoding and serving benchmarks share; ``defaults`` is their config."""
    parser.add_argument("--model", type=Path, default=defaults.model_dir, help="our model directory (default: %(default)s)")
    parser.add_argument("--dev", type=Path, default=defaults.dev_path, help="prepared dev set (default: %(default)s)")
    parser.add_argument("--corpus", default=defaults.corpus)
    parser.add_argument("--source-lang", default=defaults.source_lang)
    parser.add_argument("--target-lang", default=defaults.target_lang)
    parser.add_argument("--sentences", type=int, default=defaults.sentences)
