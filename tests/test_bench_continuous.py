"""bench.continuous on the fixture model: every in-flight level, and the fixed batches beside it, give the same outputs."""

from bench.continuous import ContinuousBenchConfig, run, table
from fixture_model import fixture_pairs, write_fixture_dev_set


def test_every_level_agrees_with_one_sentence_in_flight(fixture_model_dir, tmp_path):
    pairs = fixture_pairs()
    dev = write_fixture_dev_set(tmp_path / "dev.jsonl")
    config = ContinuousBenchConfig(fixture_model_dir, dev, corpus="fixture", sentences=len(pairs), in_flight=(1, 2, 8),
                                   threads=1)
    results = run(config)
    rows = results["results"]
    assert [r["in_flight"] for r in rows] == [1, 2, 8]
    assert all(r["same_outputs"] and r["sentences"] == len(pairs) and r["sentences_per_s"] > 0 < r["fixed_batch_sentences_per_s"]
               for r in rows)
    assert rows[0]["steps"] > rows[2]["steps"]  # sentences decoded together share steps
    assert table(results).count("| yes |") == 3
