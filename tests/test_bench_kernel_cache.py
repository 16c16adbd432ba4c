"""bench.kernel_cache on the fixture model: one fresh process per capacity, every batch size decoded twice."""

from bench.kernel_cache import KernelCacheBenchConfig, run, table
from fixture_model import write_fixture_dev_set


def test_each_capacity_decodes_every_batch_size_with_the_same_outputs(fixture_model_dir, tmp_path):
    dev = write_fixture_dev_set(tmp_path / "dev.jsonl")
    config = KernelCacheBenchConfig(fixture_model_dir, dev, corpus="fixture", sentences=3, capacities=(8, 1), threads=1)
    results = run(config)
    assert [r["capacity"] for r in results["results"]] == [8, 1]
    for r in results["results"]:
        assert r["sentences_per_pass"] == 1 + 2 + 3
        assert r["same_outputs"]  # a bounded cache rebuilds kernels; it must never change a translation
        assert all(p["rss_mib"] > 0 and p["seconds"] > 0 for p in r["passes"])
    assert results["config"]["model_dir"] == str(fixture_model_dir)
    assert table(results).count("| yes |") == 2
