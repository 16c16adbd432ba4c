"""training.optim: the warm-up schedule's shape and which parameters get weight decay."""

import pytest
import torch

from nmt.model import ModelConfig, Transformer
from training.optim import build_optimizer, learning_rate_schedule


def test_the_learning_rate_warms_up_linearly_then_decays_as_inverse_square_root():
    multiplier = learning_rate_schedule(warmup_steps=100)
    assert multiplier(0) == multiplier(1) == pytest.approx(0.01)
    assert multiplier(50) == pytest.approx(0.5)
    assert multiplier(100) == pytest.approx(1.0)
    assert multiplier(400) == pytest.approx(0.5)
    assert multiplier(10_000) == pytest.approx(0.1)


def test_a_cooldown_falls_linearly_to_zero_from_where_the_schedule_was():
    plain, cooled = learning_rate_schedule(100), learning_rate_schedule(100, cooldown_start=400, cooldown_steps=200)
    assert [cooled(s) for s in (50, 100, 400)] == [plain(s) for s in (50, 100, 400)]
    assert cooled(500) == pytest.approx(plain(400) / 2)
    assert cooled(600) == cooled(700) == 0.0


def test_scheduler_steps_the_optimizer_learning_rate():
    model = Transformer(ModelConfig(vocab_size=32, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, ffn_dim=32))
    optimizer, scheduler = build_optimizer(model, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01, schedule=learning_rate_schedule(10))
    rates = []
    for _ in range(40):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[1] < rates[5] < rates[10] == pytest.approx(1e-3)  # rates[k]: after k scheduler steps
    assert rates[10] > rates[20] > rates[39] == pytest.approx(1e-3 * (10 / 39) ** 0.5)


def test_only_matrices_are_decayed():
    model = Transformer(ModelConfig(vocab_size=32, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, ffn_dim=32))
    optimizer, _ = build_optimizer(model, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01, schedule=learning_rate_schedule(10))
    decayed, exempt = optimizer.param_groups
    assert (decayed["weight_decay"], exempt["weight_decay"]) == (0.01, 0.0)
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() < 2 for p in exempt["params"])
    assert len(decayed["params"]) + len(exempt["params"]) == len(list(model.parameters()))
    assert isinstance(optimizer, torch.optim.AdamW)


def test_fused_adamw_is_asked_for_only_when_wanted_and_updates_alike():
    """GPUs get the one-kernel AdamW; it computes the same update as the default implementation (here on the CPU)."""
    config = ModelConfig(vocab_size=32, d_model=16, n_heads=2, encoder_layers=1, decoder_layers=1, ffn_dim=32)
    updated = {}
    for fused in (False, True):
        torch.manual_seed(0)
        model = Transformer(config)
        optimizer, _ = build_optimizer(model, 1e-3, (0.9, 0.98), 1e-9, 0.01, learning_rate_schedule(10), fused=fused)
        assert optimizer.defaults["fused"] is (True if fused else None)
        model(torch.tensor([[5, 6, 7]]), torch.tensor([[2, 8]])).sum().backward()
        optimizer.step()
        updated[fused] = model.embedding.weight.detach().clone()
    torch.testing.assert_close(updated[True], updated[False])
