"""The training benchmark's FLOP count agrees with PyTorch's own count of the model's forward pass."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from bench.train import forward_flops
from nmt.model import ModelConfig, Transformer


@pytest.mark.parametrize("tie_output", [True, False])
def test_forward_flops_match_pytorch_flop_counter(tie_output):
    config = ModelConfig(vocab_size=96, d_model=32, n_heads=4, encoder_layers=2, decoder_layers=1, ffn_dim=64, dropout=0.0,
                         tie_output=tie_output)
    model = Transformer(config).eval()
    batch, source_len, target_len = 3, 7, 5
    source = torch.randint(4, config.vocab_size, (batch, source_len))
    target = torch.randint(4, config.vocab_size, (batch, target_len))
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):  # attention as counted matmuls
        model(source, target)
    assert forward_flops(config, batch, source_len, target_len) == counter.get_total_flops()
