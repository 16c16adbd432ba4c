"""`python -m training.train` end to end on configs/tiny.yaml: a kill -9 resumes exactly, torchrun DDP agrees."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "configs" / "tiny.yaml"


def environment() -> dict:
    return {**os.environ, "DATA_DIR": str(ROOT / "tests" / "fixtures"), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=timeout, check=True)


def train_command(run_dir: Path, *extra: str) -> list[str]:
    return ["-m", "training.train", "--config", str(TINY), "--run-dir", str(run_dir), "--threads", "1", "--no-progress-bar", *extra]


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step-{step:08d}" / "model.safetensors")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("tiny-run")
    run("-m", "training.prepare", "--config", str(TINY), "--run-dir", str(run_dir))
    return run_dir


def fresh_copy(prepared: Path, destination: Path) -> Path:
    shutil.copytree(prepared, destination)
    return destination


def test_training_cli_writes_checkpoints_best_model_log_and_curves(prepared, tmp_path):
    run_dir = fresh_copy(prepared, tmp_path / "run")
    result = run(*train_command(run_dir))
    assert "from scratch" in result.stdout and "stopped at step 40" in result.stdout
    assert (run_dir / "best" / "model.safetensors").is_file()
    assert (run_dir / "curves.png").is_file() and (run_dir / "metrics.jsonl").is_file()


def test_kill_9_then_resume_matches_an_uninterrupted_run(prepared, tmp_path):
    straight = fresh_copy(prepared, tmp_path / "straight")
    run(*train_command(straight))

    killed = fresh_copy(prepared, tmp_path / "killed")
    process = subprocess.Popen([sys.executable, *train_command(killed)], cwd=ROOT, env=environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first_checkpoint = killed / "checkpoints" / "step-00000010" / "training_state.pt"
    deadline = time.monotonic() + 240
    while not first_checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert first_checkpoint.exists(), "the run never wrote its first checkpoint"
    assert not (killed / "checkpoints" / "step-00000040").exists(), "the run finished before it could be killed"

    result = run(*train_command(killed))
    assert "resumed at step" in result.stdout
    expected, actual = weights(straight, 40), weights(killed, 40)
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


def test_torchrun_two_processes_agree(prepared, tmp_path):
    run_dir = fresh_copy(prepared, tmp_path / "ddp")
    torchrun = Path(sys.executable).with_name("torchrun")
    result = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node=2", *train_command(run_dir, "--max-steps", "12")],
        cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 process(es)" in result.stdout
    assert "all 2 replicas hold identical weights" in result.stdout
    assert "stopped at step 12" in result.stdout
    assert (run_dir / "checkpoints" / "step-00000012" / "model.safetensors").is_file()


def test_sigterm_stops_with_a_checkpoint(prepared, tmp_path):
    run_dir = fresh_copy(prepared, tmp_path / "sigterm")
    process = subprocess.Popen([sys.executable, *train_command(run_dir, "--max-steps", "100000")], cwd=ROOT,
                               env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text():
        assert process.poll() is None and time.monotonic() < deadline, "training never logged a step"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output
    assert "SIGTERM: finishing this step" in output
    stopped_at = int(output.split("stopped at step ")[1].split()[0])
    assert (run_dir / "checkpoints" / f"step-{stopped_at:08d}" / "training_state.pt").is_file()


def test_a_cooldown_fork_decays_to_zero_and_leaves_the_source_run_alone(prepared, tmp_path):
    source = fresh_copy(prepared, tmp_path / "source")
    run(*train_command(source, "--max-steps", "20"))
    before = {p.name: p.stat().st_mtime_ns for p in (source / "checkpoints").iterdir()}
    checkpoint = source / "checkpoints" / "step-00000020"
    fork = tmp_path / "cooled"

    result = run(*train_command(fork, "--fork-from", str(checkpoint), "--cooldown-steps", "10"))

    assert "resumed at step 20" in result.stdout and "stopped at step 30" in result.stdout
    records = [json.loads(line) for line in (fork / "metrics.jsonl").read_text().splitlines()]
    lrs = {r["step"]: r["lr"] for r in records if r["kind"] == "train"}
    assert lrs[15] > lrs[20] > lrs[25] > lrs[30] == 0.0  # the tiny recipe logs every 5 steps
    assert lrs[25] == pytest.approx(lrs[20] / 2, rel=0.05)
    assert {p.name: p.stat().st_mtime_ns for p in (source / "checkpoints").iterdir()} == before
    # Running the same command again resumes the finished fork; forking it at another step is refused.
    assert "stopped at step 30" in run(*train_command(fork, "--fork-from", str(checkpoint), "--cooldown-steps", "10")).stdout
    other = subprocess.run([sys.executable, *train_command(fork, "--fork-from", str(source / "checkpoints" / "step-00000010"),
                                                            "--cooldown-steps", "10")],
                           cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=300)
    assert other.returncode != 0 and "was forked at step 20, not 10" in other.stderr


def test_a_cooldown_runs_past_the_recipes_max_steps(prepared, tmp_path):
    """A recipe that stops its run at max_steps can still cool that last checkpoint down."""
    source = fresh_copy(prepared, tmp_path / "source")
    assert "stopped at step 40" in run(*train_command(source)).stdout  # the tiny recipe's max_steps
    result = run(*train_command(tmp_path / "cooled", "--fork-from", str(source / "checkpoints" / "step-00000040"),
                                "--cooldown-steps", "5"))
    assert "resumed at step 40" in result.stdout and "stopped at step 45" in result.stdout


def dev_nll(run_dir: Path) -> float:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "dev"][-1]["dev_nll"]


def test_a_fresh_run_warm_starts_from_fp16_weights_and_resumes_as_usual(prepared, tmp_path):
    """--init-from: the new run begins where the released (fp16) model was, not from random weights."""
    earlier = fresh_copy(prepared, tmp_path / "earlier")
    run(*train_command(earlier, "--max-steps", "20"))
    released = tmp_path / "released"
    run("-m", "training.release", "--model", str(earlier / "best"), "--out", str(released))

    warm, cold = fresh_copy(prepared, tmp_path / "warm"), fresh_copy(prepared, tmp_path / "cold")
    result = run(*train_command(warm, "--max-steps", "1", "--init-from", str(released)))
    run(*train_command(cold, "--max-steps", "1"))
    assert f"from the weights of {released}" in result.stdout
    assert dev_nll(warm) == pytest.approx(dev_nll(earlier), abs=0.1)  # one warm-up step barely moves it
    assert dev_nll(warm) < dev_nll(cold) - 0.3
    assert json.loads((warm / "best" / "metadata.json").read_text())["training"]["init_from"] == str(released)
    again = run(*train_command(warm, "--max-steps", "2", "--init-from", str(released)))
    assert "resumed at step 1 (--init-from applies to a fresh run only)" in again.stdout


def test_warm_starting_from_another_vocabulary_is_refused(prepared, tmp_path, fixture_model_dir):
    run_dir = fresh_copy(prepared, tmp_path / "run")
    result = subprocess.run([sys.executable, *train_command(run_dir, "--init-from", str(fixture_model_dir))],
                            cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert f"cannot warm-start from {fixture_model_dir}" in result.stderr
    assert "the vocabularies differ" in result.stderr or "vocab_size" in result.stderr
    assert not (run_dir / "checkpoints" / "step-00000040").exists()


def test_an_unprepared_run_directory_is_refused_with_the_command_that_prepares_it(tmp_path):
    run_dir = tmp_path / "unprepared"
    result = subprocess.run([sys.executable, *train_command(run_dir)], cwd=ROOT, env=environment(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{run_dir} is not prepared" in result.stderr and "training.prepare" in result.stderr
