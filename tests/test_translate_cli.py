"""``python -m nmt.translate``: one output line per input line, in order, and clear errors."""

import subprocess
import sys
from pathlib import Path

from fixture_model import fixture_pairs

PAIRS = fixture_pairs()


def run_cli(model_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "nmt.translate", "--model", str(model_dir), *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)


def test_lines_in_lines_out(fixture_model_dir):
    """Empty lines stay empty, multi-sentence lines stay one line, and order survives several batches."""
    (ko0, en0), (ko1, en1), (ko2, en2), (ko3, en3) = PAIRS[:4]
    lines = [ko0, "", f"{ko1} {ko2}", ko3, "", ""]
    result = run_cli(fixture_model_dir, "--source-lang", "ko", "--target-lang", "en", "--device", "cpu", "--batch-size", "2",
                     stdin="".join(line + "\n" for line in lines))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "".join(line + "\n" for line in [en0, "", f"{en1} {en2}", en3, "", ""])


def test_unsupported_language_pair_fails_clearly(fixture_model_dir):
    result = run_cli(fixture_model_dir, "--source-lang", "ko", "--target-lang", "fr", "--device", "cpu", stdin=PAIRS[0][0] + "\n")
    assert result.returncode != 0
    assert result.stdout == ""
    assert "error: language pair ko->fr is not served" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_model_directory_fails_clearly(tmp_path):
    result = run_cli(tmp_path / "absent", "--source-lang", "ko", "--target-lang", "en", "--device", "cpu")
    assert result.returncode != 0
    assert f"error: model directory {tmp_path / 'absent'} does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_reranking_by_back_translation_is_a_flag_and_a_negative_weight_fails_clearly(fixture_model_dir):
    ko, en = PAIRS[0]
    reranked = run_cli(fixture_model_dir, "--source-lang", "ko", "--target-lang", "en", "--device", "cpu",
                       "--reconstruction-weight", "1.0", stdin=ko + "\n")
    assert reranked.returncode == 0, reranked.stderr
    assert reranked.stdout == en + "\n"
    refused = run_cli(fixture_model_dir, "--source-lang", "ko", "--target-lang", "en", "--device", "cpu",
                      "--reconstruction-weight", "-1", stdin=ko + "\n")
    assert refused.returncode == 2 and "error: reconstruction_weight must be a finite number ≥ 0" in refused.stderr
