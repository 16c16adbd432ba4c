"""The tracked tree stays small enough to travel to a lent GPU machine with the data it trains on.

The device tool sends the working tree and the carried paths, 64 MiB at most; a GPU training session
(training/cuda_train.sh) carries the recipe's prepared data and the wheels the GPU image lacks beside it.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACKED_LIMIT_MIB = 50  # 64 MiB a call; release v14's recipe data takes 12.4 MiB (xz) and the wheels 2.2


def tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_tracked_files_leave_room_for_a_gpu_sessions_data():
    sizes = {path: path.stat().st_size for path in tracked_files() if path.is_file()}
    total = sum(sizes.values()) / 2**20
    largest = sorted(sizes, key=sizes.get, reverse=True)[:5]
    assert total <= TRACKED_LIMIT_MIB, (
        f"tracked files take {total:.1f} MiB, over {TRACKED_LIMIT_MIB}: a GPU session could not carry its data "
        f"(largest: {', '.join(f'{p.relative_to(ROOT)} {sizes[p] / 2**20:.1f} MiB' for p in largest)}); "
        "see bench/results/README.md"
    )
