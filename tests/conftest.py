import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The test models are tiny: one thread is as fast as two and leaves the other core to whatever runs beside.
torch.set_num_threads(1)

from fixture_model import write_fixture_model, write_level_fixture_model  # noqa: E402


@pytest.fixture(scope="session")
def fixture_model_dir(tmp_path_factory) -> Path:
    """A model directory holding the tiny overfitted ko<->en fixture model."""
    return write_fixture_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def fixture_translator(fixture_model_dir):
    from nmt.translator import Translator

    return Translator.load(fixture_model_dir, device="cpu")


@pytest.fixture(scope="session")
def level_model_dir(tmp_path_factory) -> Path:
    """A model directory holding the fixture model trained with speech-level tags (``fixtures/levels.tsv``)."""
    return write_level_fixture_model(tmp_path_factory.mktemp("models") / "levels")


@pytest.fixture(scope="session")
def level_translator(level_model_dir):
    from nmt.translator import Translator

    return Translator.load(level_model_dir, device="cpu")


@pytest.fixture
def unset_kernel_caches(monkeypatch):
    """The oneDNN kernel-cache variables (nmt.memory) unset, and unset again afterwards: setenv first, so that
    monkeypatch restores what a test's code sets."""
    from nmt.memory import KERNEL_CACHE_VARIABLES

    for variable in KERNEL_CACHE_VARIABLES:
        monkeypatch.setenv(variable, "")
        monkeypatch.delenv(variable)
    return monkeypatch
