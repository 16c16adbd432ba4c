"""nmt.memory: the oneDNN kernel-cache bound respects an operator's own setting; trimming is safe to call."""

import os

from nmt.memory import limit_kernel_cache, release_free_memory


def test_limit_kernel_cache_sets_a_default_only(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    limit_kernel_cache(16)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "16"
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024")
    limit_kernel_cache(16)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "1024"


def test_release_free_memory_keeps_live_objects_intact():
    kept = [bytearray(b"x" * 4096) for _ in range(1000)]
    del kept[::2]
    release_free_memory()
    assert all(block == b"x" * 4096 for block in kept)
