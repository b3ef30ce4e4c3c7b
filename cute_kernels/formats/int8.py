"""Int8 quantization by rows: per token for activations, per output channel for weights (``int8_scaled_mm``'s
operands and scales); symmetric, or asymmetric with a zero point per row (vLLM's ``symmetric=False`` activations).

Symmetric: ``quantize_int8_rowwise(t [..., R, K])`` returns ``q`` int8 ``[..., R, K]`` and ``scale`` float32
``[..., R]`` with ``scale = max(amax(|row|), eps) * fp32(1 / 127)`` and ``q = round(row / scale)`` (round half to
even, within -127..127), so ``row ~= q * scale``. ``eps`` only keeps an all-zero row from dividing by zero. The scale
is a product with the rounded reciprocal, not a quotient: that is what torch's CUDA division by a scalar computes,
and writing it so makes CPU, GPU and the quantizer kernel (``cute_kernels.quantize``) agree to the bit.

Asymmetric: ``quantize_int8_rowwise_asymmetric(t [..., R, K])`` returns ``q`` int8 ``[..., R, K]``, ``scale``
float32 ``[..., R]`` and a zero point ``azp`` int32 ``[..., R]`` with ``row ~= (q - azp) * scale``: the row's range
is spread over all 256 codes -128..127, so a row that is not centred on zero (after a GELU, say) gets up to twice the
symmetric resolution. In fp32, rounding half to even::

    lo, hi = min(min(row), 0), max(max(row), 0)      (NaN-propagating, as torch.amin / amax)
    scale  = max(hi - lo, eps) * fp32(1 / 255)
    azp    = int32(round(-128 - lo / scale))
    q      = clamp(round(row / scale) + azp, -128, 127)

These are vLLM's formulas (``dynamic_scaled_int8_azp_quant_kernel`` in csrc/quantization/compressed_tensors/
int8_quant_kernels.cu: ``scale = (max - min) / 255.f``, ``azp = nearbyint(-128.f - min / scale)``, codes
``cvt.sat.s8.s32(cvt.rni.sat.s32.f32(x / scale) + azp)``: the zero point is added to the rounded integer) with two
deliberate differences:

* The range always holds 0 (as PyTorch's quantization observers do). For a row that crosses zero - nearly every
  activation row - nothing changes. For a one-signed row vLLM's range [min, max] can be narrow against the values'
  magnitude, and its zero point then grows without bound (a row in [1000, 1001]: azp ~ -255000), so the GEMM's
  ``sum_k (q - azp) * b`` overflows int32, and a constant row gives scale 0 and a NaN zero point. With 0 in the
  range, ``-128 <= azp <= 127`` and ``|q - azp| <= 255`` for every finite row, which is what ``int8_scaled_mm``'s
  int32 zero-point correction needs (its ``MAX_K_ZERO_POINT``); a constant row ``c`` gets ``scale = |c| / 255``
  and comes back as ``c`` to within an fp32 rounding or two; an all-zero row gets ``scale = eps / 255``, ``azp =
  -128`` and comes back exactly 0.
* The scale is a product with the rounded reciprocal, as the symmetric one, where vLLM divides by 255.f (the two
  can differ in the last bit; the product is what CPU torch, CUDA torch and our kernel all compute identically). The
  codes divide by the scale, as vLLM's kernel did before it switched to multiplying by ``1.f / scale``.

Bounds: a code is within ``scale / 2`` of its value (plus fp32 rounding); ``-128 <= azp <= 127``. A row holding NaN
gets a NaN scale and zero point 0 (``cvt.rni.s32.f32`` of NaN), one holding +-inf (or spanning more than the fp32
range) a non-finite scale; their codes are unspecified, as the symmetric quantizer's are.
"""

from __future__ import annotations

import torch

from ..checks import check_dtype, check_tensor

_IN_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
EPS = 1e-10
_INT32_MIN, _INT32_MAX = -2 ** 31, 2 ** 31 - 1


def _rows_fp32(t: torch.Tensor) -> torch.Tensor:
    t = check_tensor("t", t)
    check_dtype("t", t, _IN_DTYPES)
    if t.dim() < 1:
        raise ValueError("t must have at least one dimension (the K values of a row)")
    return t.to(torch.float32)


def quantize_int8_rowwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``t [..., R, K]`` float -> ``(q int8 [..., R, K], scale float32 [..., R])`` (module docstring)."""
    t32 = _rows_fp32(t)
    scale = t32.abs().amax(dim=-1).clamp_min(EPS) * (1.0 / 127.0)  # see the module docstring
    q = torch.round(t32 / scale.unsqueeze(-1)).clamp_(-127, 127).to(torch.int8)
    return q, scale


def _asymmetric_range(t32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's (lo, hi): its min and max, widened to hold 0 (module docstring: why)."""
    return t32.amin(dim=-1).clamp_max(0.0), t32.amax(dim=-1).clamp_min(0.0)


def _saturate_to_int32(v: torch.Tensor) -> torch.Tensor:
    """fp32 integers -> int32 as the GPU's cvt.rni.s32.f32 converts them: clamped to the int32 range, NaN -> 0 (a plain
    ``.to(torch.int32)`` of an out-of-range value is undefined and differs between CPU and GPU)."""
    return v.double().clamp(_INT32_MIN, _INT32_MAX).nan_to_num(0.0).to(torch.int32)


def quantize_int8_rowwise_asymmetric(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``t [..., R, K]`` float -> ``(q int8 [..., R, K], scale float32 [..., R], azp int32 [..., R])`` with
    ``t ~= (q - azp) * scale`` per row (module docstring: formulas, the constant-row rule, bounds)."""
    t32 = _rows_fp32(t)
    lo, hi = _asymmetric_range(t32)
    scale = (hi - lo).clamp_min(EPS) * (1.0 / 255.0)  # a product, as the symmetric scale (module docstring)
    azp = _saturate_to_int32(torch.round(-128.0 - lo / scale))
    codes = torch.round(t32 / scale.unsqueeze(-1)) + azp.unsqueeze(-1).to(torch.float32)  # small integers: exact
    return codes.clamp_(-128, 127).to(torch.int8), scale, azp


def dequantize_int8_rowwise_asymmetric(q: torch.Tensor, scale: torch.Tensor, azp: torch.Tensor,
                                       dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(q - azp) * scale`` per row, in fp32 (the integer difference taken exactly first), cast to ``dtype``."""
    check_dtype("q", q, (torch.int8,))
    check_dtype("azp", azp, (torch.int32,))
    if scale.shape != q.shape[:-1] or azp.shape != q.shape[:-1]:
        raise ValueError(f"scale and azp must have q's shape without its last dimension, {tuple(q.shape[:-1])}; got "
                         f"{tuple(scale.shape)} and {tuple(azp.shape)}")
    steps = (q.to(torch.int64) - azp.unsqueeze(-1).to(torch.int64)).to(torch.float32)
    return (steps * scale.to(torch.float32).unsqueeze(-1)).to(dtype)
