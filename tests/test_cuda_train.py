"""training/cuda_train.sh, the one-call GPU training session, run end to end in its quick mode on the tiny fixtures:
what comes back fits the device tool's limits and joins into a model that translates."""

import subprocess
import sys
import tarfile
from pathlib import Path

from nmt.checkpoint import join_weights, weight_shards
from nmt.translator import Translator

ROOT = Path(__file__).resolve().parent.parent
RETURNED_FILES, RETURNED_FILE_BYTES = 8, 16 * 2**20  # what a call of the device tool brings back from $OUT


def test_the_quick_session_returns_a_model_in_shards_and_its_logs(tmp_path):
    out = tmp_path / "out"
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OUT": str(out), "PYTHON": sys.executable, "HOME": str(tmp_path)}
    finished = subprocess.run(["bash", "training/cuda_train.sh", "--quick"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]

    returned = [path for path in out.rglob("*") if path.is_file()]
    assert len(returned) <= RETURNED_FILES and all(path.stat().st_size <= RETURNED_FILE_BYTES for path in returned)
    assert {path.relative_to(out).parts[0] for path in returned} == {"model", "logs.tar.gz"}
    with tarfile.open(out / "logs.tar.gz") as logs:
        summary = logs.extractfile("logs/summary.txt").read().decode()
        names = set(logs.getnames())
    steps = ["prepare-data", "train", "cooldown", "release", "split"]
    assert [line.split(":")[0] for line in summary.splitlines()[: len(steps)]] == steps
    assert all(": exit 0 " in line for line in summary.splitlines()[: len(steps)]), summary
    assert {"logs/tiny-run/metrics.jsonl", "logs/tiny-run-cooldown/metrics.jsonl"} <= names

    model = out / "model"
    assert weight_shards(model) and not (model / "model.safetensors").exists()
    join_weights(model)
    translator = Translator.load(model, device="cpu")
    assert translator.metadata["weights_dtype"] == "float16"
    assert len(translator.translate(["나는 학생입니다"], "ko", "en")) == 1
