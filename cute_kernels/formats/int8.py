"""Symmetric int8 quantization by rows: per token for activations, per output channel for weights (``int8_scaled_mm``'s
operands and scales).

``quantize_int8_rowwise(t [..., R, K])`` returns ``q`` int8 ``[..., R, K]`` and ``scale`` float32 ``[..., R]`` with
``scale = max(amax(|row|), eps) * fp32(1 / 127)`` and ``q = round(row / scale)`` (round half to even, within
-127..127), so ``row ~= q * scale``. ``eps`` only keeps an all-zero row from dividing by zero. The scale is a product
with the rounded reciprocal, not a quotient: that is what torch's CUDA division by a scalar computes, and writing it
so makes CPU, GPU and the quantizer kernel (``cute_kernels.quantize``) agree to the bit.
"""

from __future__ import annotations

import torch

from ..checks import check_dtype, check_tensor

_IN_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
EPS = 1e-10


def quantize_int8_rowwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``t [..., R, K]`` float -> ``(q int8 [..., R, K], scale float32 [..., R])`` (module docstring)."""
    t = check_tensor("t", t)
    check_dtype("t", t, _IN_DTYPES)
    if t.dim() < 1:
        raise ValueError("t must have at least one dimension (the K values of a row)")
    t32 = t.to(torch.float32)
    scale = t32.abs().amax(dim=-1).clamp_min(EPS) * (1.0 / 127.0)  # see the module docstring
    q = torch.round(t32 / scale.unsqueeze(-1)).clamp_(-127, 127).to(torch.int8)
    return q, scale
