"""training.metrics: the JSONL log survives a resume without duplicate steps, and the curves render."""

from training.metrics import MetricsLog, plot_curves


def test_resume_drops_records_newer_than_the_restored_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for step in (50, 100, 150):
        log.write({"kind": "train", "step": step, "nll": 1.0})
    log.write({"kind": "dev", "step": 100, "dev_nll": 2.0})

    resumed = MetricsLog(path, resume_step=100)  # the checkpoint was step 100; steps after it will be redone
    assert [(r["kind"], r["step"]) for r in resumed.records()] == [("train", 50), ("train", 100), ("dev", 100)]


def test_a_fresh_run_starts_an_empty_log(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"kind": "train", "step": 5, "nll": 1.0}\n')
    assert MetricsLog(path).records() == []


def test_plot_curves_writes_a_png(tmp_path):
    records = [{"kind": "train", "step": s, "nll": 5 - s / 100} for s in (50, 100, 150)]
    records.append({"kind": "dev", "step": 100, "dev_nll": 4.0, "bleu/x.ko-en": 3.0, "chrf/x.ko-en": 20.0})
    plot_curves(records, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
