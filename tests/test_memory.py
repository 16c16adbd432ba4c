"""nmt.memory: the kernel-cache bounds respect an operator's own settings; trimming is safe; large blocks are reused."""

import os
import subprocess
import sys

import pytest

from nmt.memory import KERNEL_CACHE_VARIABLES, limit_kernel_cache, release_free_memory


def test_limit_kernel_cache_bounds_both_caches(unset_kernel_caches):
    limit_kernel_cache(16)
    assert {variable: os.environ[variable] for variable in KERNEL_CACHE_VARIABLES} == {
        "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "16", "LRU_CACHE_CAPACITY": "16"}


def test_limit_kernel_cache_keeps_an_operators_setting(unset_kernel_caches):
    unset_kernel_caches.setenv("LRU_CACHE_CAPACITY", "1024")
    limit_kernel_cache(16)
    assert os.environ["LRU_CACHE_CAPACITY"] == "1024"
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"


def test_an_empty_kernel_cache_is_refused(unset_kernel_caches):
    with pytest.raises(ValueError, match="at least one kernel"):
        limit_kernel_cache(0)
    assert not any(variable in os.environ for variable in KERNEL_CACHE_VARIABLES)


def test_release_free_memory_keeps_live_objects_intact():
    kept = [bytearray(b"x" * 4096) for _ in range(1000)]
    del kept[::2]
    release_free_memory()
    assert all(block == b"x" * 4096 for block in kept)


def test_large_buffers_freed_by_one_step_are_reused_by_the_next_without_faulting_in_again():
    # In a child process: mallopt settings last for the whole process.
    child = """
import resource, torch
from nmt.memory import reuse_freed_memory
torch.set_num_threads(1)
def faults_of_steps(steps=6):  # each step holds two buffers above glibc's largest mmap threshold (32 MiB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for i in range(steps):
        logits, activations = torch.ones(16 * 2**20 + 1000 * i), torch.ones(12 * 2**20 - 1000 * i)
        del logits, activations
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_steps()
unmapped = faults_of_steps()
reuse_freed_memory()
faults_of_steps()
print(unmapped, faults_of_steps())
"""
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    unmapped, reused = map(int, result.stdout.split())
    assert unmapped > 100_000  # 6 steps x 112 MiB: 172,000 pages of 4 KiB, faulted in again at every allocation
    assert reused < unmapped / 10
