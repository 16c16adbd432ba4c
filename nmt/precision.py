"""Inference precisions: how a loaded model's Linear layers are stored and multiplied when it only decodes.

* ``fp32`` (the default): the trained weights, re-packed on CPUs for oneDNN, whose kernels use AVX-512
  where the BLAS that plain ``nn.Linear`` calls may not (MKL on AMD CPUs runs its AVX2 code: half speed).
* ``bf16``: on CPUs the same with bfloat16 weights and products (AVX-512-BF16/AMX); activations, LayerNorm,
  softmax and scores stay fp32. On a GPU the whole decoding copy is bfloat16 (weights, activations, key/value
  caches), so no step casts anything: ``torch.autocast`` around the search re-cast every weight at every step,
  filled fp32 caches with bf16 keys and left attention to mixed dtypes (15× slower than fp32 on an H200,
  issue 13). The GPU's LayerNorm and softmax kernels accumulate in fp32, and the search takes its
  log-probabilities in fp32 from the bf16 logits.
* ``int8``: weights quantised per output channel, activations quantised on the fly (PyTorch's dynamic
  quantisation, fbgemm kernels; CPU only).

At every precision the query, key and value projections of self-attention are fused into one product.
The output projection shares the embedding matrix in training; for inference on CPUs it gets its own copy in
the layer's precision, while the embedding lookup keeps fp32.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

from nmt.model import Transformer

PRECISIONS = ("fp32", "bf16", "int8")


class PackedLinear(nn.Module):
    """``x·Wᵀ + b`` with W in oneDNN's blocked layout (fp32 or bf16); takes and returns fp32."""

    def __init__(self, linear: nn.Linear, dtype: torch.dtype):
        super().__init__()
        self.in_features, self.out_features, self.dtype = linear.in_features, linear.out_features, dtype
        packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach().to(dtype), None)
        self.weight = nn.Parameter(packed, requires_grad=False)  # a parameter still, so parameter counts hold
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().float(), requires_grad=False)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.to(self.dtype), self.weight, self.bias, "none", [], "").to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype={self.dtype}"


def check_precision(precision: str, device: torch.device) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "int8" and device.type != "cpu":
        raise ValueError("int8 (dynamic quantisation) runs on the CPU only; use bf16 on a GPU")
    if precision == "bf16" and device.type == "cpu" and not cpu_has_bf16():
        raise ValueError(f"bf16 decoding on a CPU needs AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT, and this one has "
                         f"{torch.backends.cpu.get_cpu_capability()}: use fp32, or int8 for speed")


def cpu_has_bf16() -> bool:
    """Whether oneDNN has bf16 kernels for this CPU (without them bf16 products would be emulated, and slow)."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def fuse_self_attention(model: Transformer) -> None:
    """One (d → 3d) product for the queries, keys and values of every self-attention layer."""
    for name, module in model.named_modules():
        if name.endswith("self_attn"):
            module.fuse_projections()


def all_bfloat16(model: Transformer) -> Transformer:
    """The GPUs' bf16 decoding copy: every parameter and buffer in bfloat16, so every step stays in one dtype."""
    return model.to(torch.bfloat16)


def prepare_for_inference(model: Transformer, precision: str = "fp32") -> Transformer:
    """Convert ``model``, in place, into a decode-only one at ``precision``; returns it.

    Its Linear layers stop being trainable ones and its parameter names change (fused projections, untied
    output): give it a copy of a model that will still be trained or saved, as :class:`~nmt.translator.Translator` does.
    """
    device = model.embedding.weight.device
    check_precision(precision, device)
    model.eval()
    fuse_self_attention(model)
    if device.type != "cpu":
        return all_bfloat16(model) if precision == "bf16" else model
    if precision != "int8" and not torch.backends.mkldnn.is_available():
        return model
    if model.output is None:  # untie: the output projection gets its own copy of the embedding matrix
        config = model.config
        model.output = nn.utils.skip_init(nn.Linear, config.d_model, config.vocab_size, bias=False, device=device)
        model.output.weight = nn.Parameter(model.embedding.weight.detach().clone(), requires_grad=False)
    if precision == "int8":
        with warnings.catch_warnings():  # the eager quantisation API announces its move to torchao
            warnings.simplefilter("ignore")
            return quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig}, inplace=True)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    linears = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    for name, linear in linears:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, PackedLinear(linear, dtype))
    return model
