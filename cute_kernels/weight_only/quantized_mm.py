"""``quantized_mm``: x @ decode(w_packed)^T * scale [* group_scales] for 1/2/4/8-bit packed weights (seed 002).

    out[m, n] = sum_k x[m, k] * decode_bits(w_packed)[n, k] * scale * group_scales[n, k // group]

Layouts: x [M, K] fp32 / fp16 / bf16; w_packed uint8 [N, K * bits / 8] (``cute_kernels.formats.bitpack``: row n =
weight row n, LSB-first, 8 / bits values per byte); scale a Python float (per-tensor); group_scales optional
[N, K / group] (float32, fp16 or bf16; group a multiple of 32); out [M, N] in x's dtype unless ``out_dtype``.

Paths (``config.py``): M <= 16 runs the memory-bound decode tiles, larger M the tensor-core tiles of the same kernel
template; both decode in registers and accumulate in fp32 on mma.sync. fp16/bf16 x multiply on fp16/bf16 tensor
cores; fp32 x is split into two bf16 terms (~16 mantissa bits). Group scales are folded into the decoded weight in
the compute dtype (one fp16/bf16 rounding per weight, like every fp16 weight-only kernel); the per-tensor scale is
applied to the fp32 accumulator.

Shapes the kernel does not take natively - K whose packed row is not a whole number of 16-byte vectors
(K % (128 / bits) != 0), or x rows not 16-byte aligned - are zero-padded along K on the fly (a copy of w_packed per
call: correct, not fast). Host path: a call whose (shapes, strides, dtypes, device, options) signature was seen
before goes straight to the compiled TVM-FFI function, which re-checks dtypes, extents and alignment in C++.
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import arch as _arch
from .. import checks
from ..formats.bitpack import check_bits
from ..plan_cache import PlanCache
from . import config
from .compile import compile_weight_only
from .kernel import TileShape

X_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SCALE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_plans = PlanCache()  # call signature -> (compiled fn, n, group, pad)


def _check_scale(scale) -> float:
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError(f"scale must be a Python float or a 1-element tensor; got a tensor of shape "
                             f"{tuple(scale.shape)}")
        return float(scale.item())
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a Python float (the per-tensor scale); got {type(scale).__name__}")
    return float(scale)


def _check_out_dtype(out_dtype, x_dtype) -> torch.dtype:
    if out_dtype is None:
        return x_dtype
    if out_dtype not in X_DTYPES:
        raise TypeError(f"out_dtype must be None, torch.float32, torch.float16 or torch.bfloat16; got {out_dtype}")
    return out_dtype


def check_group_scales(group_scales: torch.Tensor, n: int, k: int) -> int:
    """group_scales [N, K / group] with group a multiple of 32 that divides K; returns group."""
    group_scales = checks.check_tensor("group_scales", group_scales)
    checks.check_dtype("group_scales", group_scales, SCALE_DTYPES)
    checks.check_ndim("group_scales", group_scales, (2,))
    groups = group_scales.shape[1]
    if group_scales.shape[0] != n or groups == 0 or k % groups != 0 or (k // groups) % 32 != 0:
        raise ValueError(f"group_scales must have shape [N, K / group] = [{n}, K / group] with group a multiple of "
                         f"32 that divides K = {k}; got {tuple(group_scales.shape)}")
    checks.check_inner_contiguous("group_scales", group_scales)
    return k // groups


def check_out(out: Optional[torch.Tensor], shape: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    out = checks.check_tensor("out", out)
    checks.check_dtype("out", out, (dtype,))
    checks.check_shape("out", out, shape, "[M, N]")
    if not out.is_contiguous():
        raise ValueError(f"out must be contiguous; got strides {tuple(out.stride())} for shape {tuple(out.shape)}")
    return out


def pad_x(x: torch.Tensor, k_align: int) -> torch.Tensor:
    """x [M, K] zero-padded to K a multiple of ``k_align`` (zero activations contribute nothing)."""
    k = x.shape[1]
    xp = torch.zeros((x.shape[0], -(-k // k_align) * k_align), dtype=x.dtype, device=x.device)
    xp[:, :k] = x
    return xp


def pad_w(w: torch.Tensor, k: int, k_align: int) -> torch.Tensor:
    """Packed rows [N, K * bits / 8] zero-padded to match ``pad_x``."""
    row_bytes = w.shape[1] * (-(-k // k_align) * k_align) // k
    wp = torch.zeros((w.shape[0], row_bytes), dtype=w.dtype, device=w.device)
    wp[:, :w.shape[1]] = w
    return wp


def x_needs_copy(x: torch.Tensor) -> bool:
    """The kernel reads x rows with 16-byte loads: unit inner stride, 16-byte aligned base and row stride."""
    return (x.stride(-1) != 1 and x.shape[-1] > 1) or x.data_ptr() % 16 != 0 or \
        (x.stride(0) * x.element_size()) % 16 != 0


def aligned_copy(x: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous copy (fresh allocations are 256-byte aligned; ``.contiguous()`` may return x itself)."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    out.copy_(x)
    return out


def launch(fmt_key: str, x, w, out, scale: float, group_scales, zeros, group: int, tile: TileShape, device):
    """Compile (cached) and run one specialization; shapes already valid for the kernel."""
    scale_dtype = None if group_scales is None else group_scales.dtype
    fn = compile_weight_only(fmt_key, x.dtype, out.dtype, scale_dtype, tile, _arch.current_arch(device))
    fn(x, w, out, scale, group_scales, zeros, group)
    return fn


def quantized_mm(x: torch.Tensor, w_packed: torch.Tensor, scale, bits: int,
                 group_scales: Optional[torch.Tensor] = None, out_dtype: Optional[torch.dtype] = None, *,
                 out: Optional[torch.Tensor] = None, path: Optional[str] = None,
                 tile: Optional[TileShape] = None) -> torch.Tensor:
    """Weight-only low-bit GEMM (module docstring).

    out: optional [M, N] destination (contiguous, out_dtype). path: force "decode" or "tensor_core"; tile: override
    the tile shape (benchmarks, tests)."""
    sig = (x.shape, x.stride(), x.dtype, x.device, w_packed.shape, w_packed.stride(), w_packed.dtype, bits,
           None if group_scales is None else (group_scales.shape, group_scales.stride(), group_scales.dtype),
           out_dtype, path, tile)
    plan = _plans.get(sig)
    if plan is not None and out is None and not isinstance(scale, torch.Tensor) and x.data_ptr() % 16 == 0:
        fn, n, group, pad = plan
        if pad is None:
            res = torch.empty((x.shape[0], n), dtype=out_dtype or x.dtype, device=x.device)
            try:
                fn(x, w_packed, res, float(scale), group_scales, None, group)
                return res
            except Exception:  # noqa: BLE001 - fall through to the checks, which name the argument at fault
                pass

    x = checks.check_tensor("x", x)
    w_packed = checks.check_tensor("w_packed", w_packed)
    bits = check_bits(bits)
    checks.check_dtype("x", x, X_DTYPES)
    checks.check_dtype("w_packed", w_packed, (torch.uint8,))
    checks.check_ndim("x", x, (2,))
    checks.check_ndim("w_packed", w_packed, (2,))
    scale_f = _check_scale(scale)
    out_dtype = _check_out_dtype(out_dtype, x.dtype)
    m, k = x.shape
    n = w_packed.shape[0]
    vpb = 8 // bits
    if k == 0 or k % vpb != 0:
        raise ValueError(f"K = x.shape[1] = {k} must be a positive multiple of 8 / bits = {vpb} ({bits}-bit weights "
                         f"pack {vpb} values per byte)")
    if w_packed.shape[1] != k * bits // 8:
        raise ValueError(f"w_packed must have shape [N, K * bits / 8] = [N, {k * bits // 8}] for K = {k}, "
                         f"bits = {bits}; got {tuple(w_packed.shape)}")
    group = 32
    if group_scales is not None:
        group = check_group_scales(group_scales, n, k)
    checks.check_inner_contiguous("w_packed", w_packed)
    device = checks.check_cuda({"x": x, "w_packed": w_packed, "group_scales": group_scales, "out": out})
    out = check_out(out, (m, n), out_dtype, device)
    if m == 0 or n == 0:
        return out

    path_name, tl = config.select_tile(bits, m, n, _arch.sm_count(device.index), path,
                                       scaled=group_scales is not None)
    if tile is not None:
        tl = tile
    k_align = 128 // bits
    pad = None
    xk, wk = x, w_packed
    if k % k_align != 0 or w_packed.stride(0) % 16 != 0 or w_packed.data_ptr() % 16 != 0:
        xk, wk = pad_x(x, k_align), pad_w(w_packed, k, k_align)
        pad = k_align
    elif x_needs_copy(x):
        xk = aligned_copy(x)
        pad = 0
    fn = launch(f"int{bits}", xk, wk, out, scale_f, group_scales, None, group, tl, device)
    if fn is not None:
        _plans[sig] = (fn, n, group, pad)
    return out
