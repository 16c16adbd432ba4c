"""nmt.loss: label-smoothed cross-entropy as its formula says, summed over non-pad positions only."""

import pytest
import torch
import torch.nn.functional as F

from nmt.loss import label_smoothed_nll

PAD = 0


@pytest.fixture()
def batch():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, requires_grad=True)
    labels = torch.tensor([[4, 7, 2, PAD, PAD], [1, 1, 9, 10, 3], [5, PAD, PAD, PAD, PAD]])
    return logits, labels


def test_the_loss_is_the_formula_summed_over_non_pad_positions(batch):
    logits, labels = batch
    loss, nll = label_smoothed_nll(logits, labels, 0.1, PAD)
    expected_loss = expected_nll = 0.0
    for b, t in (labels != PAD).nonzero().tolist():
        log_p = logits[b, t].detach().log_softmax(-1)
        expected_nll += -log_p[labels[b, t]]
        expected_loss += 0.9 * -log_p[labels[b, t]] + 0.1 * -log_p.mean()
    assert loss.item() == pytest.approx(float(expected_loss), rel=1e-6)
    assert nll.item() == pytest.approx(float(expected_nll), rel=1e-6)


def test_without_smoothing_it_is_cross_entropy(batch):
    logits, labels = batch
    loss, nll = label_smoothed_nll(logits, labels, 0.0, PAD)
    reference = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD, reduction="sum")
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6) and nll.item() == pytest.approx(reference.item(), rel=1e-6)


def test_pad_positions_get_no_gradient(batch):
    logits, labels = batch
    label_smoothed_nll(logits, labels, 0.1, PAD)[0].backward()
    pads = labels == PAD
    assert torch.count_nonzero(logits.grad[pads]) == 0
    assert torch.all(logits.grad[~pads].abs().sum(-1) > 0)


def test_bf16_logits_are_scored_in_fp32(batch):
    logits, labels = batch
    loss, _ = label_smoothed_nll(logits.detach().bfloat16(), labels, 0.1, PAD)
    assert loss.dtype == torch.float32
