"""AWQ from the SM90 blob alone: ``awq_blob``, ``awq_blob_to_qweight``, ``awq_blob_linear``.

Why
    On an H100 / H200 the kernels read an AWQ weight in the WGMMA blob's order (``awq_sm90.py``), a layout built from
    the checkpoint's qweight. A layer that keeps qweight (the tensors a checkpoint loads into) holds it next to the
    blob, and by default next to a third layout its decode tiles read (``awq_repack``): measured on an H100 (session
    42, docs/layers.md), 3.2-3.4x qweight's bytes once a layer ran at a few and at many tokens. A layer can hold the
    blob *instead* of qweight: the blob is qweight's codes permuted (same bytes, rows padded to 64-channel blocks and
    K to 64-value tiles), so qweight comes back from it exactly (``awq_blob_to_qweight``) whenever the checkpoint's
    tensor is wanted - a state dict, a gradient. ``nn.AwqLinear.set_weight_layout_("sm90_blob")`` does that: 1.18x
    (1.30x with both fp16 formats' parameter words), at 1.00x the time from 16 tokens on and 0.98-1.09x at 1-4.

What it computes
    ``awq_blob_linear(x, blob, scales, qzeros, bias)`` = ``awq_linear(x, qweight, scales, qzeros, bias)`` for
    ``blob = awq_blob(qweight)``: out[..., o] = sum_i x[..., i] * (q[i, o] - z[i / G, o]) * s[i / G, o] (+ bias[o]),
    fp32 accumulation, the dequantized weight rounded to x's dtype (the same kernels as ``awq_gemm``'s SM90 branch,
    so the same bits where both pick the same kernel).

Kernels
    The decode tiles on the blob (``blob_decode.py``, the kernels of ``config.AWQ_ONE_COPY``) where ``awq_gemm``
    picks decode tiles and their plan reads the blob, else the WGMMA path - at every token count: no dense
    dequantize + matmul path, which would rebuild qweight at each call.

Tensors
    blob int64 [ceil(OC / 64), ceil(IC / 64) * 256] (``wgmma.blob_from_codes``); scales [IC / G, OC] in x's dtype and
    qzeros int32 [IC / G, OC / 8] as in the checkpoint (they stay: ~3% of qweight at G = 128). SM90 only; IC and OC
    multiples of 8; G = 32 or a multiple of 64 (G = 32 runs the WGMMA path at every M).
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import arch as _arch
from .. import checks
from ..autograd import awq_grad_x, bias_grad, needs_grad, record, refuse_out
from ..checks import check_bias
from ..plan_cache import PlanCache
from . import awq_sm90, config, wgmma
from .awq import X_DTYPES, check_int32, check_scales_dtype
from .quantized_mm import aligned_copy, warm_bias_ok, x_needs_copy

_plans = PlanCache()  # (x signature, blob key, bias?) -> the run (awq_sm90.DecodePlan / WgmmaRun)


def layout_fits(in_features: int, group: int) -> bool:
    """Whether the blob's kernels take a layer (``wgmma.eligible``'s rule): IC a multiple of 8, groups that tile
    the 64-value K-tile."""
    return in_features % 8 == 0 and wgmma.group_tiles_k(group)


def blob_shape(in_features: int, out_features: int) -> tuple[int, int]:
    """The blob's shape for an IC x OC weight."""
    return (-(-out_features // wgmma.BLOCK_ROWS), -(-in_features // wgmma.K_TILE) * wgmma.BLOCK_ROWS * 4)


def awq_blob(qweight: torch.Tensor) -> torch.Tensor:
    """The SM90 blob of AutoAWQ's qweight int32 [IC, OC/8] (any device; chunked, a few ms per layer on a GPU)."""
    qweight = checks.check_tensor("qweight", qweight)
    check_int32("qweight", qweight)
    checks.check_ndim("qweight", qweight, (2,))
    return awq_sm90.blob_from_checkpoint(qweight)


def _check_blob(blob, in_features: int, out_features: int) -> None:
    blob = checks.check_tensor("blob", blob)
    if blob.dtype != torch.int64:
        raise TypeError(f"blob must be an int64 tensor (awq_blob); got {str(blob.dtype).replace('torch.', '')}")
    shape = blob_shape(in_features, out_features)
    if tuple(blob.shape) != shape or not blob.is_contiguous():
        raise ValueError(f"blob must be a contiguous [ceil(OC / 64), ceil(IC / 64) * 256] = {list(shape)} tensor for "
                         f"IC = {in_features}, OC = {out_features} (awq_blob); got {list(blob.shape)}"
                         f"{'' if blob.is_contiguous() else ', not contiguous'}")


def awq_blob_to_qweight(blob: torch.Tensor, in_features: int, out_features: int) -> torch.Tensor:
    """AutoAWQ's qweight int32 [IC, OC/8] from its blob: the exact inverse of ``awq_blob``."""
    for name, v in (("in_features", in_features), ("out_features", out_features)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive int; got {v!r}")
    if out_features % 8:
        raise ValueError(f"out_features = {out_features} must be a multiple of 8 (8 int4 per int32)")
    _check_blob(blob, in_features, out_features)
    return awq_sm90.qweight_from_blob(blob, in_features, out_features)


def check_blob_operands(x, blob, scales, qzeros) -> tuple[int, int, int]:
    """(IC, OC, G) of a call, or a ValueError / TypeError naming the argument and the rule."""
    x = checks.check_tensor("x", x)
    checks.check_dtype("x", x, X_DTYPES)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (the IC features)")
    scales = checks.check_tensor("scales", scales)
    qzeros = checks.check_tensor("qzeros", qzeros)
    checks.check_ndim("scales", scales, (2,))
    checks.check_ndim("qzeros", qzeros, (2,))
    check_scales_dtype(scales, x)
    check_int32("qzeros", qzeros)
    ic, (groups, oc) = x.shape[-1], scales.shape
    if oc % 8 or ic % 8 or groups == 0 or ic % groups:
        raise ValueError(f"x's IC = {ic} and scales' OC = {oc} must be multiples of 8 and scales' rows "
                         f"({groups}) must divide IC")
    if tuple(qzeros.shape) != (groups, oc // 8):
        raise ValueError(f"qzeros must be [IC / G, OC / 8] = {[groups, oc // 8]}; got {list(qzeros.shape)}")
    group = ic // groups
    if not wgmma.group_tiles_k(group):
        raise ValueError(f"group size G = IC / scales.shape[0] = {group} must be 32 or a multiple of 64 for the "
                         f"SM90 blob's kernels (use the checkpoint's tensors with awq_linear otherwise)")
    _check_blob(blob, ic, oc)
    return ic, oc, group


def awq_blob_linear(x: torch.Tensor, blob: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor,
                    bias: Optional[torch.Tensor] = None, *, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [..., IC] -> [..., OC] on the blob (module docstring), into ``out`` (contiguous [..., OC], x's dtype) if
    given. Differentiable in x and bias (through the dequantized weight, qweight rebuilt from the blob in the
    backward pass)."""
    if needs_grad(x, scales, bias):
        refuse_out("awq_blob_linear", out)
        x_dtype, ic, oc = x.dtype, x.shape[-1], scales.shape[1]
        return record("awq_blob_linear", lambda: awq_blob_linear(x, blob, scales, qzeros, bias),
                      ("x", "scales", "bias"), (x, scales, bias),
                      {"x": lambda g: awq_grad_x(g, awq_sm90.qweight_from_blob(blob, ic, oc), scales, qzeros,
                                                 x_dtype),
                       "bias": bias_grad})
    x2 = x.reshape(-1, x.shape[-1]) if isinstance(x, torch.Tensor) and x.dim() >= 1 else x
    if out is None and isinstance(x2, torch.Tensor) and x2.data_ptr() % 16 == 0:
        try:
            key = awq_sm90.blob_key(blob, scales, qzeros)
            run = _plans.get((x2.shape, x2.stride(), x2.dtype, key, bias is not None))
        except AttributeError:  # not tensors: the checks below say what is wrong
            run = None
        aw = awq_sm90.cached(key) if run is not None else None
        if aw is not None and (bias is None or warm_bias_ok(bias, x2.dtype, aw.out_features)):
            out = torch.empty((x2.shape[0], aw.out_features), dtype=x2.dtype, device=x2.device)
            run(x2, aw, out, bias, blob)
            return out.reshape(*x.shape[:-1], aw.out_features)

    ic, oc, group = check_blob_operands(x, blob, scales, qzeros)
    bias = check_bias(bias, oc, x.dtype)
    device = checks.check_cuda({"x": x, "blob": blob, "scales": scales, "qzeros": qzeros, "bias": bias, "out": out})
    arch = _arch.current_arch(device)
    if arch != "sm_90a":
        raise ValueError(f"blob: awq_blob_linear runs on SM90 GPUs only (the blob is the layout of their kernels); "
                         f"this device is {arch}: use the checkpoint's qweight with awq_linear "
                         f"(awq_blob_to_qweight rebuilds it)")
    m = x2.shape[0]
    if out is None:
        out = torch.empty((*x.shape[:-1], oc), dtype=x.dtype, device=device)
    else:
        out = checks.check_tensor("out", out)
        checks.check_dtype("out", out, (x.dtype,))
        if tuple(out.shape) != (*x.shape[:-1], oc) or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous [..., OC] = {[*x.shape[:-1], oc]} tensor; got "
                             f"{list(out.shape)}{'' if out.is_contiguous() else ', not contiguous'}")
        if out.data_ptr() % 16:
            return out.copy_(awq_blob_linear(x, blob, scales, qzeros, bias))
    result, out = out, out.view(m, oc)
    if m == 0:
        return result
    sms = _arch.sm_count(device.index)
    aw = awq_sm90.blob_weights(blob, ic, scales, qzeros, group)
    path_name, tile = config.select_tile(4, m, oc, sms, None, scaled=True, awq=True, k=ic, wgmma=True,
                                         blob_reader=True)
    run = awq_sm90.sm90_run(x.dtype, aw, m, sms, arch, tile if path_name == "decode" else None)
    xk = aligned_copy(x2) if x_needs_copy(x2) else x2
    run(xk, aw, out, bias, blob)
    if xk is x2:
        _plans[(x2.shape, x2.stride(), x2.dtype, awq_sm90.blob_key(blob, scales, qzeros), bias is not None)] = run
    return result
