"""Activation quantizers for the int8 and FP8 GEMMs: one kernel pass (kernel.py) where the torch references take a
handful of kernels and, for FP8, a host sync.

* ``per_token_quant_int8(x [..., K])`` -> ``(q int8 [..., K], scale float32 [...])``: ``int8_scaled_mm``'s a and
  a_scale. Bit-equal to ``formats.int8.quantize_int8_rowwise``.
  ``per_token_quant_int8(x, symmetric=False)`` -> ``(q, scale, azp int32 [...])`` with ``x ~= (q - azp) * scale``
  per row (vLLM's ``scaled_int8_quant(x, symmetric=False)``; formulas and the constant-row rule in formats/int8.py).
  Bit-equal to ``formats.int8.quantize_int8_rowwise_asymmetric``.
* ``per_token_group_quant_fp8(x [..., K], group=128)`` -> ``(q float8_e4m3fn [..., K], scale float32 [..., K/128])``:
  ``fp8_blockwise_scaled_mm``'s a and a_scale, the scale in the TMA-aligned MN-major layout the GEMM stages
  (``scale_layouts.to_tma_aligned_mn_major``). Values bit-equal to ``formats.fp8.quantize_fp8_per_token_group``
  (which returns them K-major).
* ``per_token_quant_fp8(x [..., K])`` -> ``(q float8_e4m3fn [..., K], scale float32 [...])``, one scale per row:
  ``fp8_scaled_mm``'s a and a_scale (``Fp8RowwiseLinear``; vLLM's ``scaled_fp8_quant(x,
  use_per_token_if_dynamic=True)``, whose near-zero rows differ: formats/fp8.py). Bit-equal to
  ``formats.fp8.quantize_fp8_rowwise``.

The kernel runs for fp16 / bf16 x on CUDA (FP8: sm_89 / sm_90a) with K a multiple of 16 (whole rows) or 128 (FP8
groups); x
with other strides is copied to rows at 16-byte multiples first; anything else (CPU tensors, fp32 x, other K) takes
the torch reference, so the functions accept whatever the references do. Names as in vLLM / SGLang, whose kernels
do the same job.
"""

from __future__ import annotations

import torch

from .. import arch as _arch
from ..formats.fp8 import quantize_fp8_per_token_group, quantize_fp8_rowwise
from ..formats.int8 import quantize_int8_rowwise, quantize_int8_rowwise_asymmetric
from ..formats.scale_layouts import to_tma_aligned_mn_major
from ..jit_cache import cached_compile

__all__ = ["per_token_quant_int8", "per_token_quant_int8_azp", "per_token_group_quant_fp8", "per_token_quant_fp8"]

_KERNEL_DTYPES = (torch.float16, torch.bfloat16)


_KERNEL_ARCHS = {False: ("sm_90a", "sm_80", "sm_86", "sm_89"), True: ("sm_90a", "sm_89")}  # e4m3 cvt: sm_89+


def _kernel_eligible(x: torch.Tensor, fp8: bool, k_multiple: int = 16) -> bool:
    return (isinstance(x, torch.Tensor) and x.is_cuda and x.dtype in _KERNEL_DTYPES and x.dim() >= 1
            and x.shape[-1] % k_multiple == 0 and x.numel() > 0
            and _arch.current_arch(x.device) in _KERNEL_ARCHS[fp8])


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x as [M, K] with K contiguous, 16-byte aligned rows (a copy only when the view cannot be)."""
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1 or (x2.shape[0] > 1 and x2.stride(0) % 8) or x2.data_ptr() % 16:
        x2 = x2.contiguous()
    return x2 if x2.data_ptr() % 16 == 0 else x2.clone()


# Launch with programmatic dependent launch (kernel.py, "Launch"); False: plain stream order (experiments).
PDL = True


def build(dtype: torch.dtype, fp8: bool, arch: str, extra_options: str = "", pdl: bool = True,
          zero_point: bool = False, per_token: bool = False):
    """Compile the specialization for x's ``dtype`` and the format (``fp8`` - in groups of 128, or whole rows with
    ``per_token`` - or int8) from fake tensors: ``fn(x [M, K], q [M, K], scale_flat, ld)`` (``ld`` is read by FP8
    groups only), or with ``zero_point`` (int8 only) ``fn(x, q, scale [M], azp [M])``.
    ``pdl`` applies on sm_90a only (griddepcontrol is an sm_90 instruction)."""
    import cutlass
    import cutlass.cute as cute

    from ..compile_utils import fake_stream
    from .kernel import ActivationQuantize

    xd = cutlass.Float16 if dtype == torch.float16 else cutlass.BFloat16
    m, k = cute.sym_int32(), cute.sym_int32(divisibility=16)
    fx = cute.runtime.make_fake_tensor(xd, (m, k), stride=(cute.sym_int64(divisibility=8), 1), assumed_align=16)
    qd = cutlass.Float8E4M3FN if fp8 else cutlass.Int8
    fq = cute.runtime.make_fake_tensor(qd, (m, k), stride=(cute.sym_int64(divisibility=16), 1), assumed_align=16)
    fs = cute.runtime.make_fake_tensor(cutlass.Float32, (cute.sym_int32(),), stride=(1,), assumed_align=4)
    kernel = ActivationQuantize(xd, fp8, pdl and _arch.has_pdl(arch), zero_point, per_token)
    options = f"--enable-tvm-ffi --gpu-arch {arch} {extra_options}".strip()
    if zero_point:
        fz = cute.runtime.make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), stride=(1,), assumed_align=4)
        return cute.compile(kernel.with_zero_point, fx, fq, fs, fz, fake_stream(), options=options)
    return cute.compile(kernel, fx, fq, fs, cutlass.Int32(4), fake_stream(), options=options)


def _compile(dtype: torch.dtype, fp8: bool, arch: str, zero_point: bool = False, per_token: bool = False):
    pdl = PDL
    return cached_compile("activation_quantize", (arch, str(dtype), fp8, pdl, zero_point, per_token),
                          lambda: build(dtype, fp8, arch, pdl=pdl, zero_point=zero_point, per_token=per_token))


def per_token_quant_int8(x: torch.Tensor, symmetric: bool = True) -> tuple[torch.Tensor, ...]:
    """``x [..., K]`` -> ``(q int8 [..., K], scale float32 [...])``, one scale per row; with ``symmetric=False``
    ``(q, scale, azp int32 [...])``, ``x ~= (q - azp) * scale`` (module docstring)."""
    if not symmetric:
        return _per_token_quant_int8_zero_point(x)
    if not _kernel_eligible(x, fp8=False):
        return quantize_int8_rowwise(x)
    x2 = _rows(x)
    q = torch.empty(x2.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
    _compile(x.dtype, False, _arch.current_arch(x.device))(x2, q, scale, 0)
    return q.view(x.shape), scale.view(x.shape[:-1])


def per_token_quant_int8_azp(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``per_token_quant_int8(x, symmetric=False)``: ``(q, scale, azp)`` (the name of its torch op,
    ``torch.ops.cute_kernels.per_token_quant_int8_azp``)."""
    return _per_token_quant_int8_zero_point(x)


def _per_token_quant_int8_zero_point(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not _kernel_eligible(x, fp8=False):
        return quantize_int8_rowwise_asymmetric(x)
    x2 = _rows(x)
    q = torch.empty(x2.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
    azp = torch.empty(x2.shape[0], dtype=torch.int32, device=x.device)
    _compile(x.dtype, False, _arch.current_arch(x.device), zero_point=True)(x2, q, scale, azp)
    return q.view(x.shape), scale.view(x.shape[:-1]), azp.view(x.shape[:-1])


def per_token_group_quant_fp8(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [..., K]`` -> ``(q float8_e4m3fn [..., K], scale float32 [..., K / group])`` with the scale MN-major at a
    16-byte column stride (module docstring). Only ``group = 128`` runs the kernel."""
    if group != 128 or x.dim() < 2 or not _kernel_eligible(x, fp8=True, k_multiple=128):
        # the reference on the [M, K] view, so that the scale's layout is the kernel path's for any leading dims
        q, scale = quantize_fp8_per_token_group(x.reshape(-1, x.shape[-1]), group)
        return q.view(x.shape), to_tma_aligned_mn_major(scale).view(*x.shape[:-1], scale.shape[-1])
    x2 = _rows(x)
    m, k = x2.shape
    ld = -(-m // 4) * 4
    q = torch.empty(x2.shape, dtype=torch.float8_e4m3fn, device=x.device)
    store = torch.empty((k // 128, ld), dtype=torch.float32, device=x.device)
    _compile(x.dtype, True, _arch.current_arch(x.device))(x2, q, store.view(-1), ld)
    return q.view(x.shape), store[:, :m].t().view(*x.shape[:-1], k // 128)


def per_token_quant_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [..., K]`` -> ``(q float8_e4m3fn [..., K], scale float32 [...])``, one scale per row (module docstring)."""
    if not _kernel_eligible(x, fp8=True):
        q, scale = quantize_fp8_rowwise(x.reshape(-1, x.shape[-1]), check_finite=False)
        return q.view(x.shape), scale.view(x.shape[:-1])
    x2 = _rows(x)
    q = torch.empty(x2.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(x2.shape[0], dtype=torch.float32, device=x.device)
    _compile(x.dtype, True, _arch.current_arch(x.device), per_token=True)(x2, q, scale, 0)
    return q.view(x.shape), scale.view(x.shape[:-1])
