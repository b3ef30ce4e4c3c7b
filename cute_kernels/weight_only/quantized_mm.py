"""``quantized_mm``: x @ decode(w_packed)^T * scale [* group_scales] for 1/2/4/8-bit packed weights (seed 002).

    out[m, n] = sum_k x[m, k] * decode_bits(w_packed)[n, k] * scale * group_scales[n, k // group]

Layouts: x [M, K] fp32 / fp16 / bf16; w_packed uint8 [N, K * bits / 8] (``cute_kernels.formats.bitpack``: row n =
weight row n, LSB-first, 8 / bits values per byte); scale a Python float (per-tensor); group_scales optional
[N, K / group] (float32, fp16 or bf16; group a multiple of 32); out [M, N] in x's dtype unless ``out_dtype``.

Paths (``config.py``): M <= 16 runs the memory-bound decode tiles, larger M the tensor-core tiles of the same kernel
template; both decode in registers and accumulate in fp32 on mma.sync. On SM90 with fp16/bf16 x, 1/2/4/8-bit weights
from 17 tokens up to ``config.WGMMA_MAX_M`` (4096) run the WGMMA path instead (``wgmma.py``: the weight re-ordered
once into a cached blob, decoded in registers into WGMMA's A operand) - from fewer tokens where it measured faster
(``config.WGMMA_MIN_M``: 8 at 1/2 bits, 12 at 4 bits, on layers of >= 32M weights 1 / 4 at 1 / 2 bits; with group
scales ``WGMMA_MIN_M_GROUPED``: 4 / 8 / 12, on layers of >= 32M weights 1 / 1 / 8). fp16/bf16 x multiply on fp16/bf16 tensor
cores; fp32 x is split into two bf16 terms (~16 mantissa bits). Group scales are folded into the decoded weight in
the compute dtype (one fp16/bf16 rounding per weight, like every fp16 weight-only kernel); the per-tensor scale is
applied to the fp32 accumulator.

The dense path (fp16/bf16 x, M >= ``config.DENSE_MIN_M``): ``dequantize_weights`` writes the dense [N, K] weight in
x's dtype (dequantize_kernel.py, memory-bound), then one cuBLAS GEMM, ``out.addmm_(x, W^T, beta=0, alpha=scale)``:
the per-tensor scale is cuBLAS's alpha, i.e. it multiplies the fp32 accumulator before the single rounding to the
output, exactly as in the kernel template (folding it into W would add a rounding per weight); beta=0 means out's
old contents are never read (documented for addmm: NaN/inf in it do not propagate). Group scales fold into W (one
rounding of the fp32 product). The weight is dequantized on every call, never cached: a weight updated in place
must give the new result, and a dense copy per layer would cost 2 bytes per weight of memory. fp32 x keeps the
tensor-core path: cuBLAS would run an fp32 GEMM either on TF32 (10-bit mantissas, less accurate than the kernel's
bf16 hi + lo split) or on fp32 FMA units (far slower), after writing a 4-byte-per-weight dense copy.

Shapes the kernel does not take natively - K whose packed row is not a whole number of 16-byte vectors
(K % (128 / bits) != 0), or x rows not 16-byte aligned - are zero-padded along K on the fly (a copy of w_packed per
call: correct, not fast). Host path: a call whose (shapes, strides, dtypes, device, options) signature was seen
before goes straight to the compiled TVM-FFI function, which re-checks dtypes, extents and alignment in C++.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from .. import arch as _arch
from .. import checks
from ..checks import check_bias
from ..autograd import bias_grad, needs_grad, quantized_grad_x, record, refuse_out
from ..formats import bitpack
from ..formats.bitpack import check_bits
from ..plan_cache import PlanCache
from . import config, wgmma
from .compile import compile_dequantize, compile_weight_only
from .formats import format_by_key
from .kernel import TileShape, check_group_index_k, promotes_scales

X_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DENSE_DTYPES = (torch.float16, torch.bfloat16)  # dense weights and the x dtypes of the dense path
SCALE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DENSE_K_ALIGN = 8  # the dequantize kernel writes 16-byte chunks of 8 values; other K are padded
_MAX_DENSE_CHUNKS = 2**31 - 2**12  # the kernel's int32 chunk index (with a CTA of headroom)

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
    check_group_index_k(k, groups)
    checks.check_inner_contiguous("group_scales", group_scales)
    return k // groups


def warm_bias_ok(bias: torch.Tensor, dtype: torch.dtype, n: int) -> bool:
    """Whether a warm call may pass ``bias`` straight to the kernel (else the checks above run)."""
    return (isinstance(bias, torch.Tensor) and bias.dtype == dtype and bias.dim() == 1 and bias.shape[0] == n
            and bias.stride(0) == 1 and bias.is_cuda)


def check_out(out: Optional[torch.Tensor], shape: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    out = checks.check_tensor("out", out)
    checks.check_dtype("out", out, (dtype,))
    checks.check_shape("out", out, shape, "[M, N]")
    if not out.is_contiguous():
        raise ValueError(f"out must be contiguous; got strides {tuple(out.stride())} for shape {tuple(out.shape)}")
    return out


def warm_out(out: Optional[torch.Tensor], m: int, n: int, dtype: torch.dtype, device) -> Optional[torch.Tensor]:
    """The warm path's destination: a fresh [m, n] tensor, or ``out`` if it passes ``check_out``'s rules (else None:
    the full checks then name what is wrong). A few attribute reads, not the checks' cost."""
    if out is None:
        return torch.empty((m, n), dtype=dtype, device=device)
    if out.dtype == dtype and out.shape == (m, n) and out.is_contiguous() and out.device == device \
            and out.data_ptr() % 16 == 0:
        return out
    return None


def out_needs_copy(out: torch.Tensor) -> bool:
    """A valid ``out`` whose base is not 16-byte aligned (a slice of a larger buffer): the kernels store 16-byte
    vectors and their compiled signatures require that alignment, so the op computes into a fresh tensor and copies
    the result into ``out`` (the x-side counterpart is ``aligned_copy``)."""
    return out.numel() > 0 and out.data_ptr() % 16 != 0


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


def use_promoted_scales(fmt_key: str, has_scales: bool, group: int, x_dtype: torch.dtype, tile: TileShape) -> bool:
    """Where the kernel applies group scales to its fp32 partial sums (valid where kernel.promotes_scales says so), as
    measured on the H200 (session 4, docs/weight_only.md): the signed formats on the decode tiles (<= 16 tokens per
    CTA; int4 g128 as fast or faster) and for fp32 x (faster, and 2.5e-6 vs 2.2e-3 relative error); fp16 / bf16 x on
    the 32-token tensor-core tiles keeps the fold (promoted 3-5% slower: M = 32 62.7 vs 61.0 us, M = 64 62.0 vs 59.0).
    AWQ promotes only on decode tiles with warps side by side along N (``warps_n > 1``, the multi-wave layers): on the
    H100 (session 19, benchmarks/experiments/awq_decode_promote.py, three interleaved rounds) promoted was 1-2% faster
    there on all 8 points (M = 1, 2, 4, 8; best of three) (8192^2 M = 1 / 2 / 4 16.59 / 16.74 / 17.33 -> 16.37 / 16.54 / 17.01 us, 14336 x 4096
    15.59 / 15.44 / 15.74 -> 15.30 / 15.18 / 15.37) and 9-19% slower on the one-warp-column tiles (4096 x 14336 M = 1
    14.74 -> 17.07; 4096^2 5.47 -> 6.29), as the H200 found for those in session 4. Nor on the one-CTA-per-SM tiles
    (``config.is_one_cta_per_sm``): folded was faster on two of three
    layers there (session 51)."""
    if fmt_key == "awq_zmma":
        return promotes_scales(format_by_key(fmt_key), has_scales, group)  # its MMAs sum unscaled u - z
    if fmt_key == "awq_fma" or (fmt_key == "awq" and (tile.warps_n == 1 or tile.tokens_per_cta > 16
                                                      or config.is_one_cta_per_sm(tile))):
        return False  # awq_fma: the one-fma decode is for the tiles that fold the scale (awq.decode_format)
    return promotes_scales(format_by_key(fmt_key), has_scales, group) and (
        tile.tokens_per_cta <= 16 or x_dtype == torch.float32)


def launch(fmt_key: str, x, w, out, scale: float, group_scales, zeros, group: int, tile: TileShape, device,
           bias=None):
    """Compile (cached) and run one specialization; shapes already valid for the kernel. ``bias``: [N] in out's
    dtype, added in the epilogue (its own compiled variant). The compiled function takes it as its last argument,
    None for the variant without one."""
    # (with TileShape.param_words the scales' argument holds int32 words of scales in x's dtype)
    scale_dtype = None if group_scales is None else x.dtype if tile.param_words else group_scales.dtype
    promote = use_promoted_scales(fmt_key, group_scales is not None, group, x.dtype, tile)
    fn = compile_weight_only(fmt_key, x.dtype, out.dtype, scale_dtype, tile, _arch.current_arch(device), promote,
                             has_bias=bias is not None)
    fn(x, w, out, scale, group_scales, zeros, group, bias)
    return fn


def check_packed_k(w_packed: torch.Tensor, bits: int, k: int, k_name: str) -> None:
    """K a positive multiple of 8 / bits, and w_packed [N, K * bits / 8]."""
    vpb = 8 // bits
    if k <= 0 or k % vpb != 0:
        raise ValueError(f"{k_name} = {k} must be a positive multiple of 8 / bits = {vpb} ({bits}-bit weights "
                         f"pack {vpb} values per byte)")
    if w_packed.shape[1] != k * bits // 8:
        raise ValueError(f"w_packed must have shape [N, K * bits / 8] = [N, {k * bits // 8}] for K = {k}, "
                         f"bits = {bits}; got {tuple(w_packed.shape)}")


# ------------------------------------------------------------------------------------------------ the dense path
def dequantize_reference(w_packed: torch.Tensor, bits: int, k: int, group_scales, dtype: torch.dtype):
    """CPU reference of the dequantize kernel: ``(decode * float32(group_scales)).to(dtype)`` (bitpack's float32
    dequantization with scale 1.0, rounded once to ``dtype``); the kernel matches it bit for bit."""
    gs = None if group_scales is None else group_scales.float()
    return bitpack.dequantize_weights(w_packed, bits, k, 1.0, gs).to(dtype)


def launch_dequantize(w: torch.Tensor, out: torch.Tensor, gs_flat, group: int, bits: int, device) -> None:
    """Compile (cached) and run the dequantize kernel on tensors already in its layout (dequantize_kernel.py)."""
    fn = compile_dequantize(bits, out.dtype, None if gs_flat is None else gs_flat.dtype, _arch.current_arch(device))
    fn(w, out, gs_flat, group)


def dense_weight(w_packed: torch.Tensor, bits: int, k: int, group_scales, group: int, dtype: torch.dtype,
                 device) -> torch.Tensor:
    """The dense [N, K8] weight (K8 = K rounded up to 8; columns past K hold junk) from checked CUDA tensors."""
    n = w_packed.shape[0]
    k8 = -(-k // DENSE_K_ALIGN) * DENSE_K_ALIGN
    if n * (k8 // DENSE_K_ALIGN) > _MAX_DENSE_CHUNKS:
        raise ValueError(f"the dense weight [N, K] = [{n}, {k}] is too large for the dequantize kernel "
                         f"(N * K / 8 must be < 2^31)")
    w = w_packed
    if k8 != k:  # zero codes past K: their (junk) columns are never read
        w = pad_w(w_packed, k, DENSE_K_ALIGN)
    elif tuple(w.stride()) != (w.shape[1], 1) or w.data_ptr() % bits != 0:  # rows back to back, `bits`-aligned
        w = aligned_copy(w)
    gs_flat = None if group_scales is None else group_scales.contiguous().view(-1)
    out = torch.empty((n, k8), dtype=dtype, device=device)
    if n:
        launch_dequantize(w, out, gs_flat, group, bits, device)
    return out


def dequantize_weights(w_packed: torch.Tensor, bits: int, k: int, group_scales: Optional[torch.Tensor] = None,
                       dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Dense weight [N, K] = decode(w_packed) [* group_scales[n, k // group]] in ``dtype`` (fp16 / bf16).

    Decode as ``cute_kernels.formats.bitpack``; with group scales (float32, fp16 or bf16 [N, K / group], group a
    multiple of 32) each weight is the float32 product rounded once to ``dtype``. The per-tensor scale is not
    applied (``quantized_mm``'s dense path applies it to the GEMM output). CUDA tensors: the dequantize kernel
    (memory-bound; a fresh tensor each call); CPU tensors: the reference (``dequantize_reference``), bit-equal.
    No backward (group scales that require grad give an output whose backward raises; ``autograd.py``).
    """
    if needs_grad(group_scales):
        return record("dequantize_weights", lambda: dequantize_weights(w_packed, bits, k, group_scales, dtype),
                      ("group_scales",), (group_scales,), {})
    w_packed = checks.check_tensor("w_packed", w_packed)
    bits = check_bits(bits)
    checks.check_dtype("w_packed", w_packed, (torch.uint8,))
    checks.check_ndim("w_packed", w_packed, (2,))
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int (the number of weight values per row); got {type(k).__name__}")
    check_packed_k(w_packed, bits, k, "k")
    if dtype not in DENSE_DTYPES:
        raise TypeError(f"dtype must be torch.float16 or torch.bfloat16; got {dtype}")
    group = 32
    if group_scales is not None:
        group = check_group_scales(group_scales, w_packed.shape[0], k)
    tensors = {"w_packed": w_packed, "group_scales": group_scales}
    if all(t is None or t.device.type == "cpu" for t in tensors.values()):
        return dequantize_reference(w_packed, bits, k, group_scales, dtype)
    checks.check_inner_contiguous("w_packed", w_packed)
    device = checks.check_cuda(tensors)
    dense = dense_weight(w_packed, bits, k, group_scales, group, dtype, device)
    return dense if dense.shape[1] == k else dense[:, :k].contiguous()


def dense_mm(x: torch.Tensor, w_packed: torch.Tensor, out: torch.Tensor, scale: float, bits: int, k: int,
             group_scales, group: int, bias=None) -> torch.Tensor:
    """out = (x @ W^T) * scale [+ bias] with W = dense_weight(...) in x's dtype: one cuBLAS GEMM, scale as alpha,
    the bias as its beta * C."""
    wt = dense_weight(w_packed, bits, k, group_scales, group, x.dtype, x.device)[:, :k].t()  # [K, N] column-major
    if out.dtype == x.dtype:
        if bias is None:
            out.addmm_(x, wt, beta=0, alpha=scale)  # beta = 0: out's old contents are not read
        else:
            torch.addmm(bias, x, wt, alpha=scale, out=out)
    else:  # fp32 accumulator out of cuBLAS, scaled in fp32, then (for the other 16-bit type) rounded once more
        acc = torch.mm(x, wt, out_dtype=torch.float32)
        if out.dtype == torch.float32 and bias is None:
            torch.mul(acc, scale, out=out)
        else:
            acc.mul_(scale)
            if bias is not None:
                acc.add_(bias.float())
            out.copy_(acc)
    return out


def _dense_plan(bits: int, k: int, x, w, out, scale, group_scales, zeros, group, bias=None):
    """The dense path behind the compiled-kernel call signature of the warm path (``fn(x, w, out, scale, ...)``)."""
    return dense_mm(x, w, out, scale, bits, k, group_scales, group, bias)


def quantized_mm(x: torch.Tensor, w_packed: torch.Tensor, scale, bits: int,
                 group_scales: Optional[torch.Tensor] = None, out_dtype: Optional[torch.dtype] = None, *,
                 bias: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None, path: Optional[str] = None,
                 tile: Optional[TileShape] = None) -> torch.Tensor:
    """Weight-only low-bit GEMM (module docstring).

    bias: optional [N] in out_dtype, added in the epilogue (fp32, before the one rounding; the dense path's cuBLAS
    beta * C). out: optional [M, N] destination (contiguous, out_dtype). path: force "decode", "tensor_core",
    "wgmma" (SM90, fp16 / bf16 x, 1/2/4-bit) or "dense" (fp16 / bf16 x only); tile: override the tile shape of the
    kernel template
    (benchmarks, tests; with a tile and no path the dispatcher picks neither the dense nor the WGMMA path).
    With x (or bias) requiring grad the call is recorded for autograd (d x through the dequantized weight;
    ``autograd.py``)."""
    if needs_grad(x, scale, group_scales, bias):
        refuse_out("quantized_mm", out)
        x_dtype, k = x.dtype, x.shape[-1]
        return record("quantized_mm", lambda: quantized_mm(x, w_packed, scale, bits, group_scales, out_dtype,
                                                           bias=bias, path=path, tile=tile),
                      ("x", "scale", "group_scales", "bias"), (x, scale, group_scales, bias),
                      {"x": lambda g: quantized_grad_x(g, w_packed, float(scale), bits, k, group_scales, x_dtype),
                       "bias": bias_grad})
    sig = (x.shape, x.stride(), x.dtype, x.device, w_packed.shape, w_packed.stride(), w_packed.dtype, bits,
           None if group_scales is None else (group_scales.shape, group_scales.stride(), group_scales.dtype),
           out_dtype, path, tile, bias is not None)
    plan = _plans.get(sig)
    if plan is not None and not isinstance(scale, torch.Tensor) and x.data_ptr() % 16 == 0:
        fn, n, group, pad = plan
        res = warm_out(out, x.shape[0], n, out_dtype or x.dtype, x.device) if pad is None else None
        if res is not None and (bias is None or warm_bias_ok(bias, out_dtype or x.dtype, n)):
            try:
                fn(x, w_packed, res, float(scale), group_scales, None, group, bias)
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
    if path == "dense" and x.dtype not in DENSE_DTYPES:
        raise ValueError(f"path='dense' needs fp16 or bf16 x; got {str(x.dtype).replace('torch.', '')} (fp32 x runs "
                         f"on the tensor-core path: see the module docstring)")
    m, k = x.shape
    n = w_packed.shape[0]
    check_packed_k(w_packed, bits, k, "K = x.shape[1]")
    group = 32
    if group_scales is not None:
        group = check_group_scales(group_scales, n, k)
    checks.check_inner_contiguous("w_packed", w_packed)
    bias = check_bias(bias, n, out_dtype)
    device = checks.check_cuda({"x": x, "w_packed": w_packed, "group_scales": group_scales, "out": out,
                                "bias": bias})
    out = check_out(out, (m, n), out_dtype, device)
    if m == 0 or n == 0:
        return out
    if out_needs_copy(out):
        return out.copy_(quantized_mm(x, w_packed, scale_f, bits, group_scales, out_dtype, bias=bias, path=path,
                                      tile=tile))

    sms = _arch.sm_count(device.index)
    wgmma_ok = tile is None and device.type == "cuda" and wgmma.eligible(
        x, bits, n, k, group if group_scales is not None else None, out_dtype, _arch.current_arch(device))
    path_name, tl = config.select_tile(bits, m, n, sms, path, scaled=group_scales is not None,
                                       dense=x.dtype in DENSE_DTYPES and (tile is None or path == "dense"), k=k,
                                       wgmma=wgmma_ok)
    if path_name == "wgmma":
        xk = aligned_copy(x) if x_needs_copy(x) else x
        plan = wgmma.WgmmaPlan(wgmma.signed_format(bits, group_scales is not None, m), bits,
                               wgmma.select_config(m, n, k, sms), sms)
        plan(xk, w_packed, out, scale_f, group_scales, None, group, bias)
        _plans[sig] = (plan, n, group, None if xk is x else 0)
        return out
    if path_name == "dense":
        dense_mm(x, w_packed, out, scale_f, bits, k, group_scales, group, bias)
        _plans[sig] = (functools.partial(_dense_plan, bits, k), n, group, None)
        return out
    if tile is not None:
        tl = tile.validate()  # a forced tile= gets a named error instead of a failed launch
    k_align = 128 // bits
    pad = None
    xk, wk = x, w_packed
    if k % k_align != 0 or w_packed.stride(0) % 16 != 0 or w_packed.data_ptr() % 16 != 0:
        xk, wk = pad_x(x, k_align), pad_w(w_packed, k, k_align)
        pad = k_align
    elif x_needs_copy(x):
        xk = aligned_copy(x)
        pad = 0
    fn = launch(f"int{bits}", xk, wk, out, scale_f, group_scales, None, group, tl, device, bias)
    if fn is not None:
        _plans[sig] = (fn, n, group, pad)
    return out
