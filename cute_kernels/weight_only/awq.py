"""AWQ on the weight-only machinery: ``awq_gemm``, ``awq_dequantize``, ``awq_linear`` (seed 003; vLLM's signatures).

Tensors are AutoAWQ's, as loaded from a checkpoint (``cute_kernels.formats.awq``): x fp16/bf16 [M, IC]; qweight
int32 [IC, OC/8] (8 int4 along OC in the order 0,2,4,6,1,3,5,7); scales [IC/G, OC] in x's dtype; qzeros int32
[IC/G, OC/8]. ``out[m, o] = sum_i x[m, i] * (q[i, o] - z[i // G, o]) * s[i // G, o]``.

* ``awq_gemm`` runs the weight-only kernel template with the ``awq`` format (formats.py): the checkpoint is repacked
  once per weight tensor into the kernel's K-packed layout, in fragment order, and cached (awq_repack.py says why and
  how); the same M dispatch as ``quantized_mm`` picks decode or tensor-core tiles, and on SM90 every M from
  ``config.wgmma_min_m`` tokens (8 on small layers, 9 where their decode grid is one wave and K <= 8192, 1 where it
  is more than one wave; 6 on layers of >= 32M weights, 7 on ~4096-row ones; 1 on long-K layers whose plan reduces
  its K slices in clusters - 5 there where the decode tile has warps side by side, session 52 - and on
  many-wave ones) runs the WGMMA path (wgmma.py), which reads a blob built once from
  the checkpoint for WGMMA's register operand and its scales and zero points as words per group and row (awq_sm90.py:
  one blob per weight, no repack). With ``config.AWQ_ONE_COPY`` the SM90 decode tiles read that blob too
  (blob_decode.py) and no repack is built. The dequantized weight ``(q - z) * s`` is rounded to x's dtype before the
  MMA, as vLLM's kernel does; accumulation is fp32. The decode tiles with warps side by side instead sum ``(q - z) x``
  exactly per group and scale those fp32 sums (promoted scales); their format is ``awq_zmma`` (bf16: on the register
  pipeline only), whose MMAs take the code with the magic number as it is and whose second MMA per MMA subtracts
  magic and zero point (formats.AwqInt4ZeroMma).
* ``awq_dequantize`` -> [IC, OC] in the scales' dtype: a CuTe kernel on CUDA tensors (reads the checkpoint layout
  directly, no repack), the float reference on CPU tensors.
* ``awq_linear``: any leading batch dims; at >= ``config.awq_dense_min_tokens`` tokens dequantize + torch.matmul (a
  dense tensor-core GEMM; the bias through ``addmm``), below that the fused ``awq_gemm`` (the bias in its epilogue).
  With the WGMMA path (SM90, IC a multiple of 8) the switch is above ``config.WGMMA_MAX_M`` (4096) tokens, else at 256
  (17 for OC <= 4096).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from .. import arch as _arch
from .. import checks
from ..checks import check_bias
from ..autograd import awq_grad_x, bias_grad, needs_grad, record, refuse_out
from ..formats.awq import awq_dequantize_reference, check_awq_tensors
from ..plan_cache import PlanCache
from . import awq_repack, awq_sm90, config, wgmma
from .compile import compile_awq_dequantize
from .kernel import TileShape, check_group_index_k
from .quantized_mm import (aligned_copy, check_out, launch, out_needs_copy, pad_x, use_promoted_scales,
                           warm_bias_ok, warm_out, x_needs_copy)

X_DTYPES = (torch.float16, torch.bfloat16)

_plans = PlanCache()  # awq_gemm call signature (incl. the repack cache key) -> (compiled fn, group)


def check_int32(name: str, t) -> None:
    """qweight / qzeros: AutoAWQ's int32 words (other types are left to the shape checks)."""
    if isinstance(t, torch.Tensor) and t.dtype != torch.int32:
        raise TypeError(f"{name} must be an int32 tensor (AutoAWQ packs 8 int4 per int32); got "
                        f"{str(t.dtype).replace('torch.', '')}")


def check_scales_dtype(scales: torch.Tensor, x: torch.Tensor) -> None:
    if scales.dtype != x.dtype:
        raise TypeError(f"scales must have x's dtype {str(x.dtype).replace('torch.', '')}; got "
                        f"{str(scales.dtype).replace('torch.', '')}")


def _check_awq(qweight, scales, qzeros) -> tuple[int, int, int]:
    check_int32("qweight", qweight)
    check_int32("qzeros", qzeros)
    return check_awq_tensors(qweight, scales, qzeros)


def _check_group(group: int, ic: int) -> None:
    if group % 32 != 0 and group != ic:
        raise ValueError(f"group size G = IC / scales.shape[0] = {group} must be a multiple of 32 or all of IC = {ic}")
    check_group_index_k(ic, -(-ic // group), "IC")


def awq_gemm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
             split_k_iters: Optional[int] = None, *, bias: Optional[torch.Tensor] = None,
             out: Optional[torch.Tensor] = None, path: Optional[str] = None,
             tile: Optional[TileShape] = None) -> torch.Tensor:
    """Fused AWQ GEMM; returns [M, OC] in x's dtype (into ``out`` if given).

    ``split_k_iters`` is accepted for vLLM compatibility (a positive int) and otherwise unused: the kernel splits K
    across the warps of a CTA itself. ``bias`` [OC] in x's dtype is added in the kernel's epilogue (fp32, before the
    one rounding). ``path`` / ``tile`` force a path / tile shape (benchmarks, tests).
    With x (or bias) requiring grad the call is recorded for autograd (d x through the dequantized weight;
    ``autograd.py``).
    """
    if needs_grad(x, scales, bias):
        refuse_out("awq_gemm", out)
        x_dtype = x.dtype
        return record("awq_gemm", lambda: awq_gemm(x, qweight, scales, qzeros, split_k_iters, bias=bias, path=path,
                                                   tile=tile),
                      ("x", "scales", "bias"), (x, scales, bias),
                      {"x": lambda g: awq_grad_x(g, qweight, scales, qzeros, x_dtype), "bias": bias_grad})
    if path is None and tile is None and isinstance(x, torch.Tensor) and x.data_ptr() % 16 == 0:
        try:
            cache_key = awq_repack.cache_key(qweight, scales, qzeros)
            plan = _plans.get((x.shape, x.stride(), x.dtype, cache_key, bias is not None))
        except AttributeError:  # not tensors: the checks below say what is wrong
            plan = None
        derived = plan.derived(cache_key) if plan is not None else None
        if derived is not None and (bias is None or warm_bias_ok(bias, x.dtype, derived.out_features)):
            res = warm_out(out, x.shape[0], derived.out_features, x.dtype, x.device)
            if res is not None:
                plan(x, derived, res, bias)
                return res

    x = checks.check_tensor("x", x)
    ic, oc, group = _check_awq(qweight, scales, qzeros)
    checks.check_dtype("x", x, X_DTYPES)
    checks.check_ndim("x", x, (2,))
    check_scales_dtype(scales, x)
    if x.shape[1] != ic:
        raise ValueError(f"x must be [M, IC] with IC = qweight.shape[0] = {ic}; got {tuple(x.shape)}")
    if split_k_iters is not None and (isinstance(split_k_iters, bool) or not isinstance(split_k_iters, int)
                                      or split_k_iters < 1):
        raise ValueError(f"split_k_iters must be None or a positive int; got {split_k_iters!r}")
    _check_group(group, ic)
    bias = check_bias(bias, oc, x.dtype)
    device = checks.check_cuda({"x": x, "qweight": qweight, "scales": scales, "qzeros": qzeros, "out": out,
                                "bias": bias})
    m = x.shape[0]
    out = check_out(out, (m, oc), x.dtype, device)
    if m == 0:
        return out
    if out_needs_copy(out):
        return out.copy_(awq_gemm(x, qweight, scales, qzeros, split_k_iters, bias=bias, path=path, tile=tile))
    sms = _arch.sm_count(device.index)
    wgmma_ok = tile is None and _wgmma_eligible(x, oc, ic, group, device)
    path_name, tl = config.awq_select_tile(m, oc, ic, sms, path, wgmma_ok, group, x.dtype)
    signature = (x.shape, x.stride(), x.dtype, awq_repack.cache_key(qweight, scales, qzeros), bias is not None)
    if path_name == "wgmma" or (wgmma_ok and path_name == "decode" and config.AWQ_ONE_COPY
                                and awq_sm90.decode_ok(tl, group, ic)):
        # SM90: the WGMMA path, and with config.AWQ_ONE_COPY the decode tiles too, read the blob (awq_sm90.py)
        aw = awq_sm90.weights(qweight, scales, qzeros, group)
        xk = aligned_copy(x) if x_needs_copy(x) else x
        run = awq_sm90.sm90_run(x.dtype, aw, m, sms, _arch.current_arch(device),
                                tl if path_name == "decode" else None)
        run(xk, aw, out, bias)
        if xk is x and path is None:
            _plans[signature] = _Sm90Plan(run)
        return out
    kw = awq_repack.kernel_weights(qweight, scales, qzeros, group)
    xk = x
    if ic % awq_repack.K_ALIGN != 0:
        xk = pad_x(x, awq_repack.K_ALIGN)
    elif x_needs_copy(x):
        xk = aligned_copy(x)
    tl = config.awq_repack_tile(tile).validate() if tile else tl
    fmt_key = decode_format(path_name, x.dtype, kw, tl)
    if tile is None:
        tl = config.tile_for_format(fmt_key, tl, ic, oc, sms)
    fn = launch(fmt_key, xk, kw.w, out, 1.0, *group_params(kw, tl.param_words), group, tl, device, bias)
    if fn is not None and xk is x and path is None and tile is None:
        _plans[signature] = _RepackPlan(fn, group, tl.param_words)
    return out


class _RepackPlan:
    """A warm call on the K-packed repack (``awq_repack``): ``plan(x, kw, out, bias)``."""

    def __init__(self, fn, group: int, param_words: bool):
        self.fn, self.group, self.param_words = fn, group, param_words

    @staticmethod
    def derived(cache_key):
        return awq_repack.cached(cache_key)

    def __call__(self, x, kw, out, bias):
        self.fn(x, kw.w, out, 1.0, *group_params(kw, self.param_words), self.group, bias)


def group_params(kw, param_words: bool) -> tuple:
    """The kernel's (group_scales, zeros) arguments for a tile with or without ``TileShape.param_words``."""
    return (kw.param_words(), None) if param_words else (kw.scales, kw.zeros)


class _Sm90Plan:
    """A warm call on the SM90 blob (``awq_sm90``): ``plan(x, aw, out, bias)``."""

    def __init__(self, run):
        self.run = run

    @staticmethod
    def derived(cache_key):
        return awq_sm90.cached(cache_key)

    def __call__(self, x, aw, out, bias):
        self.run(x, aw, out, bias)


# x dtypes whose AWQ weights the decode path's tiles that fold the scale into the weight (not the promoted ones)
# decode with one fma per pair (``formats.AwqInt4OneFma`` with e = 0: every |s| < 0.25); () = always the exact format.
# Session 34 (H100, awq_one_fma.py in the data archive's session40/moved/, forced decode path, interleaved,
# float64-checked): 0.95-1.00x the exact format's time where it applies (4096^2 at 1 / 2 / 4 / 8 tokens 5.68 / 5.83 /
# 6.08 / 6.96 -> 5.59 / 5.71 / 5.80 / 6.82 us; 4096 x 14336 at 4 tokens 15.72 -> 15.30, at 1 14.60 -> 14.59), max error
# 6e-4 relative to max|ref| (exact 4e-4).
DECODE_ONE_FMA_DTYPES = (torch.float16,)


# Where the decode tiles that promote the scales (warps side by side: use_promoted_scales) decode AWQ with
# ``formats.AwqInt4ZeroMma`` (a lop3 per pair; the zero point and the magic number by a second MMA): fp16 x on every
# such tile, bf16 x on the register pipeline's (``tile.stages == 0``), not on the cp.async ring's.
# Session 52 (H200, awq_ablate44.py, 5-7 interleaved rounds, µs at 1 / 4 tokens, awq -> awq_zmma). fp16: 8192^2 13.82 /
# 14.26 -> 12.75 / 12.87 (two-warp register tile; through the WGMMA entry: config.AWQ_ZERO_MMA_LONG_K_MAX_M), 14336 x
# 4096 12.71 / 13.48 -> 12.61 / 13.08 (the ring of four warps side by side; 12.68 / 13.16 -> 12.57 / 12.82 in another
# run); layers not used to choose: 7168 x 4096 7.78 / 7.87 -> 7.28 / 7.28, 8192 x 4096 7.68 / 7.89 -> 7.07 / 7.26,
# 16384 x 4096 12.88 / 13.34 -> 12.76 / 12.90, 13824 x 3072 9.97 / 10.19 -> 9.79 / 9.93, 8192 x 2048 4.77 / 4.93 ->
# 4.45 / 4.69. bf16: register tiles 8192^2 13.83 / 14.33 -> 13.55 / 13.46, 7168 x 4096 7.78 / 7.95 -> 7.61 / 7.67;
# rings slower: 14336 x 4096 12.60 / 13.01 -> 13.34 / 13.46, 16384 x 4096 12.92 / 13.56 -> 13.63 / 13.81, 13824 x
# 3072 9.98 / 10.24 -> 10.46 / 10.57. On the tiles that fold the scale (one warp across: awq_fma) it was slower in
# fp16 (4096 x 14336 11.22 / 11.73 -> 11.74 / 12.22, 2048 x 8192 +11%, 1536 x 8960 +14%, as promoted scales are
# there; 4096^2 even), and on the one-CTA-per-SM tiles mixed (13824 x 5120 -5%, 10240 x 8192 +10%): not there.
DECODE_ZERO_MMA_DTYPES = (torch.float16, torch.bfloat16)
# x dtypes whose AWQ decode tiles of config.awq_param_words_kind's shapes run awq_zmma with parameter words whatever
# their warps side by side (the other dtypes: where the rules above say; config.AWQ_PARAM_WORDS_WARPS_N's and
# AWQ_PARAM_WORDS_WIDE_TILES' comments).
DECODE_PARAM_WORDS_DTYPES = (torch.float16,)
DECODE_ZERO_MMA_RING_DTYPES = (torch.float16,)


def decode_format(path_name: str, x_dtype: torch.dtype, kw, tile: TileShape) -> str:
    """The format key the decode path runs ``kw`` with (the tensor-core tiles keep ``awq``)."""
    from .formats import AWQ_ONE_FMA, AWQ_ZERO_MMA, F16

    if path_name != "decode":
        return "awq"
    if (x_dtype in DECODE_PARAM_WORDS_DTYPES and config.awq_param_words_tile(tile)
            and use_promoted_scales(AWQ_ZERO_MMA.key, True, kw.group, x_dtype, tile)):
        return AWQ_ZERO_MMA.key
    if use_promoted_scales("awq", True, kw.group, x_dtype, tile):
        if x_dtype in DECODE_ZERO_MMA_DTYPES and (tile.stages == 0 or x_dtype in DECODE_ZERO_MMA_RING_DTYPES):
            return AWQ_ZERO_MMA.key
    elif (x_dtype in DECODE_ONE_FMA_DTYPES and math.isfinite(kw.max_abs_scale)
          and AWQ_ONE_FMA.exponent(F16, kw.max_abs_scale) == 0):
        return AWQ_ONE_FMA.key
    return "awq"


def typical_format_and_tile(path_name: str, x_dtype: torch.dtype, tile: TileShape, group: int = 128,
                            k: int | None = None, n: int | None = None,
                            sm_count: int | None = None) -> tuple[str, TileShape]:
    """(format, tile) awq_gemm runs on a decode or tensor-core ``tile`` for AutoAWQ-sized scales (every |s| < 0.25:
    awq_fma's e = 0) over a K (IC) of ``k`` and N (OC) of ``n`` on ``sm_count`` SMs: what the export and layout CLIs
    compile and show."""
    from types import SimpleNamespace

    fmt = decode_format(path_name, x_dtype, SimpleNamespace(max_abs_scale=0.0, group=group), tile)
    return fmt, config.tile_for_format(fmt, tile, k, n, sm_count)


def _wgmma_eligible(x: torch.Tensor, oc: int, ic: int, group: int, device) -> bool:
    return device.type == "cuda" and wgmma.eligible(x, 4, oc, ic, group, x.dtype, _arch.current_arch(device))


def awq_dequantize(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor) -> torch.Tensor:
    """[IC, OC] = (q - z) * s in the scales' dtype (rounded once); CUDA: a kernel, CPU: the reference. No backward
    (scales that require grad give an output whose backward raises; ``autograd.py``)."""
    if needs_grad(scales):
        return record("awq_dequantize", lambda: awq_dequantize(qweight, scales, qzeros), ("scales",), (scales,), {})
    ic, oc, group = _check_awq(qweight, scales, qzeros)
    tensors = {"qweight": qweight, "scales": scales, "qzeros": qzeros}
    if all(t.device.type == "cpu" for t in tensors.values()):
        return awq_dequantize_reference(qweight, scales, qzeros)
    device = checks.check_cuda(tensors)
    if scales.stride(-1) != 1 or scales.data_ptr() % 16 != 0 or (scales.shape[0] > 1 and scales.stride(0) % 8):
        scales = aligned_copy(scales)
    out = torch.empty((ic, oc), dtype=scales.dtype, device=device)
    if ic == 0:
        return out
    fn = compile_awq_dequantize(scales.dtype, _arch.current_arch(device))
    fn(qweight, qzeros, scales, out, group)
    return out


def awq_linear(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
               bias: Optional[torch.Tensor] = None, *, dense_min_tokens: Optional[int] = None) -> torch.Tensor:
    """AWQ linear layer: x [..., IC] -> [..., OC]; path by token count (module docstring). Differentiable in x and
    bias on both paths (frozen weights: ``autograd.py``)."""
    x = checks.check_tensor("x", x)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (the IC features)")
    ic = qweight.shape[0] if isinstance(qweight, torch.Tensor) else None
    if ic is not None and x.shape[-1] != ic:
        raise ValueError(f"x must be [..., IC] with IC = qweight.shape[0] = {ic}; got {tuple(x.shape)}")
    x2 = x.reshape(-1, x.shape[-1])
    tokens = x2.shape[0]
    if dense_min_tokens is not None:
        threshold = dense_min_tokens
    elif isinstance(qweight, torch.Tensor):
        oc = qweight.shape[1] * 8
        ic = qweight.shape[0]
        group = ic // scales.shape[0] if isinstance(scales, torch.Tensor) and scales.dim() == 2 and scales.shape[0] \
            else ic
        on_gpu = x.is_cuda and qweight.is_cuda
        threshold = config.awq_dense_min_tokens(oc, wgmma=on_gpu and _wgmma_eligible(x2, oc, ic, group, x.device))
    else:
        threshold = 0  # not a tensor: the checks of the path below name the fault
    if tokens >= threshold:  # either path checks the bias (check_bias)
        checks.check_dtype("x", x, X_DTYPES)
        _, oc, _ = _check_awq(qweight, scales, qzeros)
        check_scales_dtype(scales, x)
        bias = check_bias(bias, oc, x.dtype)
        checks.check_cuda({"x": x, "qweight": qweight, "scales": scales, "qzeros": qzeros, "bias": bias})
        w = awq_dequantize(qweight, scales, qzeros)
        out = torch.matmul(x2, w) if bias is None else torch.addmm(bias, x2, w)
    else:
        out = awq_gemm(x2, qweight, scales, qzeros, bias=bias)  # the bias in the kernel's epilogue
    return out.reshape(*x.shape[:-1], out.shape[1])
