"""Label-smoothed cross-entropy (Szegedy et al., 2016), the training objective."""

import torch.nn.functional as F
from torch import Tensor


def label_smoothed_nll(logits: Tensor, labels: Tensor, smoothing: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed loss over non-pad labels: (1-ε)·NLL + ε·mean over the vocabulary of −log p.

    Returns (smoothed loss, plain NLL), both summed, so callers normalise by the token count.
    """
    log_probs = logits.float().log_softmax(dim=-1).view(-1, logits.size(-1))
    labels = labels.reshape(-1)
    keep = labels != pad_id
    log_probs, labels = log_probs[keep], labels[keep]
    nll = -log_probs.gather(1, labels[:, None]).squeeze(1)
    uniform = -log_probs.mean(dim=-1)
    return ((1.0 - smoothing) * nll + smoothing * uniform).sum(), nll.sum()
