"""Benchmarks of decoding, serving and training (``make bench``); the write-up is BENCHMARKS.md."""
