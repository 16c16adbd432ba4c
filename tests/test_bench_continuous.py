"""bench.continuous on the fixture model: every in-flight level translates the same sentences to the same outputs."""

import json

from bench.continuous import ContinuousBenchConfig, run, table
from fixture_model import fixture_pairs


def test_every_level_agrees_with_one_sentence_in_flight(fixture_model_dir, tmp_path):
    pairs = fixture_pairs()
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps({"corpus": "fixture", "source_lang": "ko", "target_lang": "en", "source": ko,
                                       "target": en}, ensure_ascii=False) + "\n" for ko, en in pairs))
    config = ContinuousBenchConfig(fixture_model_dir, dev, corpus="fixture", sentences=len(pairs), in_flight=(1, 2, 8),
                                   threads=1)
    results = run(config)
    rows = results["results"]
    assert [r["in_flight"] for r in rows] == [1, 2, 8]
    assert all(r["same_outputs"] and r["sentences"] == len(pairs) and r["sentences_per_s"] > 0 for r in rows)
    assert rows[0]["steps"] > rows[2]["steps"]  # sentences decoded together share steps
    assert table(results).count("| yes |") == 3
