"""Keep the resident memory of long-running CPU processes (training runs, the server) flat.

Every batch has a new shape, and two caches keep one compiled oneDNN kernel, with its buffers, per shape:
oneDNN's primitive cache and ideep's (PyTorch's oneDNN wrapper) computation cache, 1,024 entries each by
default. Under bf16 autocast, training grew by ~10 MB a step (to 5 GB in 300 steps); in the server, whose
step-level batching meets a new row count at almost every join, resident memory crept up for many minutes
before the caches were full (BENCHMARKS.md, "Soak"). Small caches hold it flat.

Separately, glibc keeps freed activation buffers in its heap instead of returning them; an occasional
``malloc_trim`` hands them back. Trimming every step would cost speed (the next step faults the pages back
in), so the trainer does it every few dozen steps and the server's batcher every few seconds between
decoding steps. Blocks above 32 MiB are the exception: glibc unmaps them as soon as they are freed, which a
training step pays for in page faults every step, so a training process keeps those in the heap too
(:func:`reuse_freed_memory`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

KERNEL_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")  # oneDNN's, ideep's


def limit_kernel_cache(capacity: int = 16) -> None:
    """Bound both kernel caches to ``capacity`` shapes, unless the operator's environment already sets them.

    Must run before the first oneDNN kernel is built: before a model is loaded for decoding (the fp32 and bf16
    CPU copies re-pack their weights with oneDNN) or before training starts. A capacity of 0 is refused:
    ideep (torch 2.13) crashes the process with an empty cache.
    """
    if capacity < 1:
        raise ValueError(f"a kernel cache needs room for at least one kernel, got {capacity}")
    for variable in KERNEL_CACHE_VARIABLES:
        os.environ.setdefault(variable, str(capacity))


M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


def configure_training_process() -> None:
    """What a training process sets before its first step (``make train``, and ``make bench-train`` to measure it)."""
    limit_kernel_cache()
    reuse_freed_memory()


def reuse_freed_memory() -> None:
    """Keep freed memory in the heap for the next allocations instead of handing it back at once (glibc only).

    glibc maps every block above 32 MiB on its own and unmaps it when freed, so a training step's large buffers
    (the logits of 4,096 tokens over 8,000 pieces alone are 131 MB) were mapped, faulted in page by page and unmapped
    again every step: a third of a 2-core step went to the kernel, and training runs 63 % faster without it
    (BENCHMARKS.md, "Page faults were a third of the step"). With no separate mappings and no automatic trim, the next step reuses what this
    one freed; :func:`release_free_memory`, every few dozen steps, still returns what stays unused.
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(M_MMAP_MAX, 0)
        libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


def release_free_memory() -> None:
    """Hand the heap's free pages back to the OS (glibc only; a no-op elsewhere)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name and "libc.so" in name else None
