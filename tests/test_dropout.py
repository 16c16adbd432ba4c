"""nmt.dropout: the cheap CPU mask drops at the asked rate in every lane, keeps the expectation, and backpropagates
through the mask it drew."""

import pytest
import torch
import torch.nn.functional as F

from nmt.dropout import LANES, Dropout, drop_threshold, keep_mask

COUNT = 400_000  # elements: the keep rate's standard error is below 0.0005


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_the_keep_rate_is_one_minus_p_in_each_of_the_four_lanes(p):
    torch.manual_seed(0)
    mask = keep_mask((COUNT,), p)
    assert mask.dtype == torch.bool and mask.shape == (COUNT,)
    for lane in range(4):  # each 64-bit draw feeds four elements; the top lane's sign bit is always 0
        assert mask[lane::4].float().mean().item() == pytest.approx(1 - p, abs=0.004)


def test_neighbouring_elements_are_independent():
    torch.manual_seed(0)
    mask = keep_mask((COUNT,), 0.5).float()
    both_kept = (mask[:-1] * mask[1:]).mean().item()
    assert both_kept == pytest.approx(0.25, abs=0.004)


def test_the_output_keeps_the_input_in_expectation_and_zeroes_the_rest():
    torch.manual_seed(0)
    x = torch.full((COUNT,), 2.0)
    y = Dropout(0.1).train()(x)
    kept = y != 0
    assert torch.allclose(y[kept], torch.tensor(2.0 * LANES / (LANES - drop_threshold(0.1))))
    assert y.mean().item() == pytest.approx(2.0, abs=0.01)


def test_the_gradient_flows_through_the_same_mask():
    torch.manual_seed(0)
    x = torch.randn(64, 32, requires_grad=True)
    y = Dropout(0.25).train()(x)
    y.sum().backward()
    scale = LANES / (LANES - drop_threshold(0.25))
    assert torch.equal(x.grad, (y != 0).float() * scale)


def test_the_same_seed_draws_the_same_mask_and_another_seed_another():
    masks = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        masks.append(keep_mask((3, 5, 7), 0.1))
    assert torch.equal(masks[0], masks[1]) and not torch.equal(masks[0], masks[2])


def test_eval_mode_and_zero_probability_are_the_identity():
    x = torch.randn(10, 10)
    assert Dropout(0.3).eval()(x) is x
    assert Dropout(0.0).train()(x) is x


@pytest.mark.parametrize("p", [-0.1, 1.0, 0.99999])
def test_probabilities_outside_the_range_are_refused(p):
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(p)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_a_gpu_torch_dropout_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(F, "dropout", lambda x, p, training: calls.append(p) or x)
    Dropout(0.1).train()(torch.ones(4, device="cuda"))
    assert calls == [0.1]
