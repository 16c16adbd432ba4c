"""bench.serve on the fixture model: a real server process, every concurrency level answered, its options passed on."""

import json

from bench.serve import ServeConfig, parse_args, run, table
from fixture_model import write_fixture_dev_set


def test_every_level_is_answered_by_a_server_started_with_the_requested_budget(fixture_model_dir, tmp_path):
    dev = write_fixture_dev_set(tmp_path / "dev.jsonl")
    out = tmp_path / "serve.json"
    config = ServeConfig(fixture_model_dir, dev, corpus="fixture", sentences=3, requests=6, clients=(1, 3), threads=1,
                         precisions=("fp32",), batching=(True,), max_batch_tokens=300, warmup_requests=1, out=out)
    results = run(config)

    rows = results["results"]
    assert [r["clients"] for r in rows] == [1, 3]
    assert all(r["errors"] == 0 and r["requests_per_s"] > 0 for r in rows)
    assert rows[0]["vs_one_client"] == 1.0 and rows[0]["mean_batch"] == 1.0
    assert 1.0 <= rows[1]["mean_batch"] <= 3.0
    serving = next(json.loads(line) for line in out.with_name("serve-fp32-batching.log").read_text().splitlines()
                   if line.startswith("{") and json.loads(line).get("message") == "serving")
    assert serving["max_batch_tokens"] == 300
    assert results["config"]["max_batch_tokens"] == 300
    assert table(rows).count("| fp32 | on | quiet |") == 2


def test_the_budget_defaults_to_the_servers_choice():
    assert parse_args(["--max-batch-tokens", "8192"]).max_batch_tokens == 8192
    assert parse_args([]).max_batch_tokens is None
