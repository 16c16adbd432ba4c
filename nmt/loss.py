"""Label-smoothed cross-entropy (Szegedy et al., 2016), the training objective."""

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll(logits: Tensor, labels: Tensor, smoothing: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed loss over non-pad labels: (1-ε)·NLL + ε·mean over the vocabulary of −log p.

    Returns (smoothed loss, plain NLL), both summed, so callers normalise by the token count. Pad positions are
    masked out of the per-position sums rather than indexed away: selecting the non-pad rows would copy the whole
    (positions × vocabulary) matrix forward and scatter it back in the backward pass, more than half the cost of
    this function on a CPU.
    """
    log_probs = logits.float().log_softmax(dim=-1)
    nll = F.nll_loss(log_probs.flatten(0, -2), labels.reshape(-1), ignore_index=pad_id, reduction="sum")
    uniform = -log_probs.mean(dim=-1).masked_fill(labels == pad_id, 0.0).sum()
    return (1.0 - smoothing) * nll + smoothing * uniform, nll
