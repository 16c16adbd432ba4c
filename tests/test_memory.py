"""nmt.memory: the kernel-cache bounds respect an operator's own settings; trimming is safe to call."""

import os

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
