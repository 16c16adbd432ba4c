"""The training log: one JSON object per line, and a PNG of the curves drawn from it."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


class MetricsLog:
    """Appends records to ``metrics.jsonl``; on resume, drops records newer than the restored step."""

    def __init__(self, path: Path, resume_step: int = 0):
        self.path = path
        kept = [r for r in self.records() if r.get("step", 0) <= resume_step] if resume_step else []
        path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def write(self, record: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def plot_curves(records: list[dict], path: Path) -> None:
    """Training and dev loss on the left, dev BLEU/chrF on the right, against optimizer steps."""
    train = [r for r in records if r.get("kind") == "train"]
    dev = [r for r in records if r.get("kind") == "dev"]
    fig, (loss_ax, score_ax) = plt.subplots(1, 2, figsize=(11, 4))
    loss_ax.plot([r["step"] for r in train], [r["nll"] for r in train], label="train NLL/token", alpha=0.7)
    loss_ax.plot([r["step"] for r in dev], [r["dev_nll"] for r in dev], "o-", label="dev NLL/token")
    loss_ax.set(xlabel="step", ylabel="loss (nats)", title="loss")
    loss_ax.legend()
    for key in sorted({k for r in dev for k in r if k.startswith(("bleu", "chrf"))}):
        score_ax.plot([r["step"] for r in dev if key in r], [r[key] for r in dev if key in r], "o-", label=key)
    score_ax.set(xlabel="step", ylabel="score", title="dev scores (beam search)")
    if dev:
        score_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
