"""The trainer on the fixture corpus: loss goes down, logs and plots appear, resuming is exact, and the numbers
on CPU are those of the trainer before its batches were prefetched and its losses read once per log."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from fixture_model import FIXTURES, fixture_examples, fixture_pairs, tiny_config, train_fixture_tokenizer, without_bt
from nmt.model import Transformer
from training.state import warm_start
from training.trainer import DevPair, Trainer, TrainingConfig

RANDOM_VOCABULARY = 600


def make_trainer(run_dir, tokenizer, examples=None, vocab_size=None, dev=None, device="cpu", **overrides) -> Trainer:
    """A trainer on the fixture corpus (or on ``examples`` over ``vocab_size`` ids), its model seeded alike every time."""
    torch.manual_seed(0)
    examples = fixture_examples(tokenizer) if examples is None else examples
    dev = [DevPair("tiny", "ko", "en", ko, en) for ko, en in fixture_pairs()[:8]] if dev is None else dev
    settings = dict(max_tokens=160, warmup_steps=10, lr=3e-3, log_every=5, eval_every=20, save_every=10,
                    max_steps=40, dev_max_sentences=8, dev_beam_size=2, progress_bar=False, seed=3)
    config = TrainingConfig(**{**settings, **overrides})
    model = Transformer(tiny_config(vocab_size or tokenizer.vocab_size, dropout=0.1)).to(device)
    metadata = {"name": "test", "language_pairs": [["ko", "en"], ["en", "ko"]]}
    return Trainer(model, tokenizer, [s for s, _ in examples], [t for _, t in examples], dev, config, run_dir, metadata)


def random_examples(count: int = 120, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Random ids (fixed by ``seed``): numbers trained on them depend on the model and the loop, not on a tokenizer."""
    rng = np.random.default_rng(seed)
    words = lambda: rng.integers(4, RANDOM_VOCABULARY, rng.integers(3, 20)).tolist()
    return [(words() + [3], [2, *words(), 3]) for _ in range(count)]


@pytest.mark.parametrize("update_freq", [1, 2])
def test_cpu_losses_match_the_trainer_before_prefetching_and_deferred_reads(tmp_path, update_freq):
    """The logged loss, NLL and gradient norm of 12 steps equal, bit for bit, the recorded run
    (tests/fixtures/trainer_trajectory.json). Commit 581554d checked the loop against the trainer of commit d9514bb
    (padding in the loop, every loss read as it came); session 20 re-recorded it for the dropout masks of
    nmt.dropout, with the loss unchanged but for the NLL's summation order (7th digit).

    Bit for bit on the CPU kernels that recorded it (torch's AVX2 code); AVX-512 kernels sum in another order, so
    there the numbers agree to rounding only."""
    trainer = make_trainer(tmp_path, train_fixture_tokenizer(), random_examples(), RANDOM_VOCABULARY, dev=[],
                           max_steps=12, log_every=2, eval_every=1000, save_every=1000, update_freq=update_freq)
    trainer.resume()
    trainer.fit()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    logged = [{key: r[key] for key in ("step", "epoch", "loss", "nll", "grad_norm")} for r in records if r["kind"] == "train"]
    recorded = json.loads((FIXTURES / "trainer_trajectory.json").read_text())
    expected = recorded[f"update_freq_{update_freq}"]
    if torch.backends.cpu.get_cpu_capability() != recorded["cpu_capability"]:
        expected = [{key: pytest.approx(value, rel=1e-5) for key, value in record.items()} for record in expected]
    assert logged == expected


def test_training_lowers_loss_and_writes_log_plot_and_best(tmp_path):
    tokenizer = train_fixture_tokenizer()
    trainer = make_trainer(tmp_path, tokenizer)
    trainer.resume()
    trainer.fit()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    dev = [r for r in records if r["kind"] == "dev"]
    assert train[-1]["nll"] < train[0]["nll"] * 0.7
    assert [r["step"] for r in dev] == [20, 40]
    assert dev[-1]["dev_nll"] < dev[0]["dev_nll"]
    assert "bleu/tiny.ko-en" in dev[-1] and "chrf/tiny.ko-en" in dev[-1]
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "best" / "model.safetensors").is_file()
    assert not (tmp_path / "best" / "training_state.pt").exists()


def test_keep_last_limits_checkpoints(tmp_path):
    trainer = make_trainer(tmp_path, train_fixture_tokenizer(), keep_last=2, eval_every=1000)
    trainer.resume()
    trainer.fit()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000030", "step-00000040"]


def test_resume_is_exact(tmp_path):
    """N steps straight == N/2 steps, a fresh process state, then N/2 more from the checkpoint."""
    tokenizer = train_fixture_tokenizer()
    straight = make_trainer(tmp_path / "straight", tokenizer, max_steps=30)
    straight.resume()
    straight.fit()

    first_half = make_trainer(tmp_path / "split", tokenizer, max_steps=15)
    first_half.resume()
    first_half.fit()
    torch.manual_seed(1234)  # a resumed process starts with other RNG state; the checkpoint must restore it
    second_half = make_trainer(tmp_path / "split", tokenizer, max_steps=30)
    assert second_half.resume()
    assert second_half.progress.step == 15
    second_half.fit()

    expected = load_file(tmp_path / "straight" / "checkpoints" / "step-00000030" / "model.safetensors")
    actual = load_file(tmp_path / "split" / "checkpoints" / "step-00000030" / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


def test_cpu_attention_kernels_train_alike(tmp_path):
    """The math and the fused attention kernel compute the same function: one update gives the same loss."""
    tokenizer = train_fixture_tokenizer()
    losses = []
    for kernel in ("math", "fused"):
        trainer = make_trainer(tmp_path / kernel, tokenizer, cpu_attention=kernel)
        losses.append(trainer.update([trainer.batch(np.arange(8))]).read()["loss"])
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


def test_unknown_cpu_attention_kernel_is_refused():
    with pytest.raises(ValueError, match="cpu_attention"):
        TrainingConfig(cpu_attention="flash")


def test_warm_start_copies_the_weights_and_refuses_another_shape(fixture_model_dir, fixture_translator):
    tokenizer = fixture_translator.tokenizer
    same = Transformer(tiny_config(tokenizer.vocab_size, dropout=0.3))  # dropout may differ
    warm_start(same, tokenizer, fixture_model_dir)
    for name, tensor in fixture_translator.model.state_dict().items():
        assert torch.equal(same.state_dict()[name], tensor), name
    wider = Transformer(tiny_config(tokenizer.vocab_size, d_model=128))
    with pytest.raises(ValueError, match=r"different model: d_model 64 \(the recipe: 128\)"):
        warm_start(wider, tokenizer, fixture_model_dir)


def test_warm_start_grows_the_vocabulary_by_appended_pieces_only(fixture_model_dir, fixture_translator):
    """A run whose tokenizer appends a piece (``<xx>``) keeps every trained row and the fresh row of the new one."""
    tokenizer = fixture_translator.tokenizer
    grown_tokenizer = tokenizer.with_control_pieces(["<xx>"])
    grown = Transformer(tiny_config(grown_tokenizer.vocab_size))
    fresh_row = grown.embedding.weight[-1].clone()
    warm_start(grown, grown_tokenizer, fixture_model_dir)
    trained = fixture_translator.model.state_dict()
    assert torch.equal(grown.embedding.weight[:-1], trained["embedding.weight"])
    assert torch.equal(grown.embedding.weight[-1], fresh_row)
    for name, tensor in trained.items():
        if name != "embedding.weight":
            assert torch.equal(grown.state_dict()[name], tensor), name
    shifted = without_bt(tokenizer).with_control_pieces(["<bt>"])  # the same pieces, not at the same ids
    with pytest.raises(ValueError, match="the vocabularies differ"):
        warm_start(Transformer(tiny_config(shifted.vocab_size)), shifted, fixture_model_dir)


@pytest.mark.parametrize("has_kernels", [True, False])
def test_bf16_on_a_cpu_is_used_only_where_it_has_kernels(tmp_path, monkeypatch, has_kernels):
    """A recipe asking for bf16 runs unchanged on any CPU: without bf16 kernels it trains in fp32."""
    monkeypatch.setattr("training.trainer.cpu_has_bf16", lambda: has_kernels)
    trainer = make_trainer(tmp_path, train_fixture_tokenizer(), bf16=True)
    assert trainer.bf16 is has_kernels
    assert make_trainer(tmp_path / "default", train_fixture_tokenizer()).bf16 is False
