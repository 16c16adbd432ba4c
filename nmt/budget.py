"""How much to decode at once on a device: the default token budget of a batch and the CLI's lines per call.

A CPU is saturated by small batches, and larger ones only add padding and memory; the CPU values are the
ones tuned on 2 cores (BENCHMARKS.md). A GPU needs wide batches to fill its cores: with the CPU budget an
H200 decoded 151 sentences/s, with a 65,536-token budget 447 (issue 13). The Translator, the command line
and the server take these unless told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DecodingBudget:
    max_batch_tokens: int  # longest source × sentences × beam of one decoded batch
    lines_per_call: int  # lines the command line reads before translating them together


CPU_BUDGET = DecodingBudget(max_batch_tokens=4096, lines_per_call=64)
GPU_BUDGET = DecodingBudget(max_batch_tokens=65_536, lines_per_call=4096)


def decoding_budget(device: torch.device | str) -> DecodingBudget:
    """The GPU budget on CUDA devices, the CPU one everywhere else."""
    return GPU_BUDGET if torch.device(device).type == "cuda" else CPU_BUDGET
