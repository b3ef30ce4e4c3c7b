"""The public ops as torch.library custom ops: ``torch.ops.cute_kernels.<name>``, for torch.compile and torch.export.

Dynamo cannot look inside a TVM-FFI call, so a model that calls ``cute_kernels.int8_scaled_mm`` directly gets a graph
break there (and ``fullgraph=True`` fails). The same ops registered here trace as one opaque node each: the real
implementation is the public function, and a fake implementation computes the output's shape and dtype from the
inputs' metadata alone, so tracing works on FakeTensors (torch.compile, torch.export) and meta tensors.

Registered (the plain functions' arguments, without their tuning knobs ``out=``, ``config=``, ``path=``, ``tile=``):

====================================  ===========================================================================
``int8_scaled_mm``                    (a, b, a_scale, b_scale, bias=None, out_dtype=bfloat16, azp_adj=None, azp=None)
``fp8_scaled_mm``                     (a, b, a_scale, b_scale, bias=None, out_dtype=bfloat16, use_fast_accum=True)
``fp8_blockwise_scaled_mm``           (a, b, a_scale, b_scale, out_dtype=bfloat16, scale_granularity=None: 1x128x128,
                                      bias=None)
``fp8_blockwise_grouped_mm``          (a, b, a_scale, b_scale, masked_m, out_dtype=bfloat16, scale_granularity=None,
                                      expected_m=None) -> [G, M_max, N]: MoE experts, masked layout
``fp8_blockwise_grouped_mm_contiguous``  (a, b, a_scale, b_scale, m_indices, out_dtype=bfloat16,
                                      scale_granularity=None) -> [M, N]: MoE experts, contiguous layout
``quantized_mm``                      (x, w_packed, scale: float, bits, group_scales=None, out_dtype=None, bias=None)
``awq_gemm`` / ``awq_linear``         (x, qweight, scales, qzeros[, bias]) -> [M, OC] / [..., OC]
``awq_blob_linear``                   (x, blob, scales, qzeros, bias=None) -> [..., OC]: AWQ from the SM90 blob
``awq_dequantize``                    (qweight, scales, qzeros) -> [IC, OC]
``dequantize_weights``                (w_packed, bits, k, group_scales=None, dtype=bfloat16) -> [N, K]
``per_token_quant_int8``              (x) -> (q int8 [..., K], scale [...])
``per_token_quant_int8_azp``          (x) -> (q int8 [..., K], scale [...], azp int32 [...]): x ~= (q - azp) * scale
``per_token_group_quant_fp8``         (x, group=128) -> (q e4m3 [..., K], scale [..., K/128], TMA-aligned MN-major)
``per_token_quant_fp8``               (x) -> (q e4m3 [..., K], scale [...])
====================================  ===========================================================================

Each has an autograd registration with the plain functions' rules (``autograd.py``): quantized_mm / awq_gemm /
awq_linear / awq_blob_linear differentiate x (and their bias) through the dequantized weight, so a compiled training step of
adapters on a frozen quantized layer works; the int8 / FP8 GEMMs differentiate their bias only; a gradient asked of
any other input raises when backward reaches the op.

In eager code call the plain functions: the dispatcher's custom-op path adds host time per call (measured in
docs/torch_compile.md). Inside a compiled graph that cost is paid once per node, like any other custom op.
The fake implementations check what the output's shape depends on (ranks, the shared inner dimension, dtypes) and
raise the plain functions' errors for those; everything else (devices, alignment, scale shapes) is checked when the
real op runs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import checks
from .autograd import awq_grad_x, bias_grad, quantized_grad_x, refuse_undifferentiable

_NS = "cute_kernels"
# Defined through torch.library.Library, not the @custom_op decorator: the decorator's Python wrapper (autograd and
# mutation bookkeeping) cost ~26 us per eager call on the H100 host (benchmarks/host_overhead.py), the dispatcher's
# direct route to a Python kernel much less (docs/torch_compile.md).
_LIB = torch.library.Library(_NS, "DEF")


def _register(schema: str, impl, fake) -> None:
    """Define ``cute_kernels::<schema>``: ``impl`` for real tensors of any device (the plain function, whose checks
    name the argument at fault, e.g. a CPU tensor), ``fake`` for FakeTensors and meta tensors."""
    name = schema.split("(", 1)[0]
    _LIB.define(schema)
    _LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{_NS}::{name}", fake, lib=_LIB)


def _inner_dims(a_name: str, a: Tensor, b_name: str, b: Tensor, b_k_axis: int) -> int:
    """Checks the ranks and the shared K of a GEMM pair; returns b's N (the output's last dimension)."""
    checks.check_gemm_pair(a, b)
    k, k_b = a.shape[-1], b.shape[b_k_axis]
    if k != k_b:
        raise ValueError(f"{a_name} has K = {k} in its last dimension but {b_name} has K = {k_b}: the inner "
                         f"dimensions must match")
    return b.shape[-1] if b_k_axis == -2 else b.shape[-2]


# ----------------------------------------------------------------------------------------------------- int8 / FP8
def _int8_scaled_mm(a, b, a_scale, b_scale, bias=None, out_dtype=torch.bfloat16, azp_adj=None, azp=None):
    from .ops.int8_scaled_mm import int8_scaled_mm

    return int8_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype, azp_adj=azp_adj, azp=azp)


def _int8_scaled_mm_fake(a, b, a_scale, b_scale, bias=None, out_dtype=torch.bfloat16, azp_adj=None, azp=None):
    checks.check_dtype("a", a, (torch.int8,))
    checks.check_dtype("b", b, (torch.int8,))
    n = _inner_dims("a", a, "b", b, -2)
    return a.new_empty((*a.shape[:-1], n), dtype=out_dtype)


def _fp8_scaled_mm(a, b, a_scale, b_scale, bias=None, out_dtype=torch.bfloat16, use_fast_accum=True):
    from .ops.int8_scaled_mm import fp8_scaled_mm

    return fp8_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype, use_fast_accum=use_fast_accum)


def _fp8_scaled_mm_fake(a, b, a_scale, b_scale, bias=None, out_dtype=torch.bfloat16, use_fast_accum=True):
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    checks.check_dtype("a", a, fp8)
    checks.check_dtype("b", b, fp8)
    n = _inner_dims("a", a, "b", b, -2)
    return a.new_empty((*a.shape[:-1], n), dtype=out_dtype)


def _fp8_blockwise_scaled_mm(a, b, a_scale, b_scale, out_dtype=torch.bfloat16, scale_granularity=None, bias=None):
    from .ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm

    gran = (1, 128, 128) if scale_granularity is None else tuple(scale_granularity)
    return fp8_blockwise_scaled_mm(a, b, a_scale, b_scale, out_dtype, gran, bias=bias)


def _fp8_blockwise_scaled_mm_fake(a, b, a_scale, b_scale, out_dtype=torch.bfloat16, scale_granularity=None,
                                  bias=None):
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    checks.check_dtype("a", a, fp8)
    checks.check_dtype("b", b, fp8)
    n = _inner_dims("a", a, "b", b, -1)  # b is [.., N, K]
    return a.new_empty((*a.shape[:-1], n), dtype=out_dtype)


def _fp8_blockwise_grouped_mm(a, b, a_scale, b_scale, masked_m, out_dtype=torch.bfloat16, scale_granularity=None,
                              expected_m=None):
    from .ops.fp8_blockwise_grouped_mm import fp8_blockwise_grouped_mm

    gran = (1, 128, 128) if scale_granularity is None else tuple(scale_granularity)
    return fp8_blockwise_grouped_mm(a, b, a_scale, b_scale, masked_m, out_dtype, gran, expected_m=expected_m)


def _fp8_blockwise_grouped_mm_fake(a, b, a_scale, b_scale, masked_m, out_dtype=torch.bfloat16,
                                   scale_granularity=None, expected_m=None):
    checks.check_ndim("a", a, (3,))
    return _fp8_blockwise_scaled_mm_fake(a, b, a_scale, b_scale, out_dtype)


def _fp8_blockwise_grouped_mm_contiguous(a, b, a_scale, b_scale, m_indices, out_dtype=torch.bfloat16,
                                         scale_granularity=None):
    from .ops.fp8_blockwise_grouped_mm import fp8_blockwise_grouped_mm_contiguous

    gran = (1, 128, 128) if scale_granularity is None else tuple(scale_granularity)
    return fp8_blockwise_grouped_mm_contiguous(a, b, a_scale, b_scale, m_indices, out_dtype, gran)


def _fp8_blockwise_grouped_mm_contiguous_fake(a, b, a_scale, b_scale, m_indices, out_dtype=torch.bfloat16,
                                              scale_granularity=None):
    checks.check_ndim("a", a, (2,))
    checks.check_ndim("b", b, (3,))
    return _fp8_blockwise_scaled_mm_fake(a, b[0], a_scale, b_scale, out_dtype)


# ---------------------------------------------------------------------------------------------- weight-only / AWQ
def _quantized_mm(x, w_packed, scale, bits, group_scales=None, out_dtype=None, bias=None):
    from .weight_only import quantized_mm

    return quantized_mm(x, w_packed, scale, bits, group_scales, out_dtype, bias=bias)


def _quantized_mm_fake(x, w_packed, scale, bits, group_scales=None, out_dtype=None, bias=None):
    if bits not in (1, 2, 4, 8):
        raise ValueError(f"bits must be 1, 2, 4 or 8; got {bits}")
    checks.check_ndim("x", x, (2,))
    checks.check_ndim("w_packed", w_packed, (2,))
    if w_packed.shape[1] * 8 != x.shape[1] * bits:
        raise ValueError(f"w_packed must have shape [N, K * bits / 8] = [N, {x.shape[1] * bits // 8}] for "
                         f"K = {x.shape[1]}, bits = {bits}; got {tuple(w_packed.shape)}")
    return x.new_empty((x.shape[0], w_packed.shape[0]), dtype=out_dtype or x.dtype)


def _awq_fake_out(x: Tensor, qweight: Tensor, lead: tuple) -> Tensor:
    checks.check_ndim("qweight", qweight, (2,))
    if x.shape[-1] != qweight.shape[0]:
        raise ValueError(f"x must be [..., IC] with IC = qweight.shape[0] = {qweight.shape[0]}; got "
                         f"{tuple(x.shape)}")
    return x.new_empty((*lead, qweight.shape[1] * 8))


def _awq_gemm(x, qweight, scales, qzeros, bias=None):
    from .weight_only import awq_gemm

    return awq_gemm(x, qweight, scales, qzeros, bias=bias)


def _awq_gemm_fake(x, qweight, scales, qzeros, bias=None):
    checks.check_ndim("x", x, (2,))
    return _awq_fake_out(x, qweight, (x.shape[0],))


def _awq_linear(x, qweight, scales, qzeros, bias=None):
    from .weight_only import awq_linear

    return awq_linear(x, qweight, scales, qzeros, bias)


def _awq_linear_fake(x, qweight, scales, qzeros, bias=None):
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (the IC features)")
    return _awq_fake_out(x, qweight, tuple(x.shape[:-1]))


def _awq_blob_linear(x, blob, scales, qzeros, bias=None):
    from .weight_only import awq_blob_linear

    return awq_blob_linear(x, blob, scales, qzeros, bias)


def _awq_blob_linear_fake(x, blob, scales, qzeros, bias=None):
    from .weight_only.awq_blob import check_blob_operands

    _, oc, _ = check_blob_operands(x, blob, scales, qzeros)
    return x.new_empty((*x.shape[:-1], oc))


def _awq_dequantize(qweight, scales, qzeros):
    from .weight_only import awq_dequantize

    return awq_dequantize(qweight, scales, qzeros)


def _awq_dequantize_fake(qweight, scales, qzeros):
    checks.check_ndim("qweight", qweight, (2,))
    return scales.new_empty((qweight.shape[0], qweight.shape[1] * 8))


def _dequantize_weights(w_packed, bits, k, group_scales=None, dtype=torch.bfloat16):
    from .weight_only import dequantize_weights

    return dequantize_weights(w_packed, bits, k, group_scales, dtype)


def _dequantize_weights_fake(w_packed, bits, k, group_scales=None, dtype=torch.bfloat16):
    checks.check_ndim("w_packed", w_packed, (2,))
    return w_packed.new_empty((w_packed.shape[0], k), dtype=dtype)


def _per_token_quant_int8(x):
    from .quantize import per_token_quant_int8

    return per_token_quant_int8(x)


def _per_token_quant_int8_fake(x):
    return x.new_empty(x.shape, dtype=torch.int8), x.new_empty(x.shape[:-1], dtype=torch.float32)


def _per_token_quant_int8_azp(x):
    from .quantize import per_token_quant_int8_azp

    return per_token_quant_int8_azp(x)


def _per_token_quant_int8_azp_fake(x):
    return (*_per_token_quant_int8_fake(x), x.new_empty(x.shape[:-1], dtype=torch.int32))


def _per_token_quant_fp8(x):
    from .quantize import per_token_quant_fp8

    return per_token_quant_fp8(x)


def _per_token_quant_fp8_fake(x):
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty(x.shape[:-1], dtype=torch.float32)


def _per_token_group_quant_fp8(x, group=128):
    from .quantize import per_token_group_quant_fp8

    return per_token_group_quant_fp8(x, group)


def _per_token_group_quant_fp8_fake(x, group=128):
    if x.dim() < 2:
        raise ValueError(f"x must be at least 2-D ([..., M, K]); got shape {tuple(x.shape)}")
    m, groups = x.numel() // x.shape[-1], -(-x.shape[-1] // group)
    store = x.new_empty((groups, -(-m // 4) * 4), dtype=torch.float32)  # the TMA-aligned MN-major scale
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), store[:, :m].t().view(*x.shape[:-1], groups)


SCHEMAS = {
    "int8_scaled_mm": ("int8_scaled_mm(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias=None, "
                       "ScalarType out_dtype=bfloat16, Tensor? azp_adj=None, Tensor? azp=None) -> Tensor",
                       _int8_scaled_mm, _int8_scaled_mm_fake),
    "fp8_scaled_mm": ("fp8_scaled_mm(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor? bias=None, "
                      "ScalarType out_dtype=bfloat16, bool use_fast_accum=True) -> Tensor", _fp8_scaled_mm,
                      _fp8_scaled_mm_fake),
    "fp8_blockwise_scaled_mm": ("fp8_blockwise_scaled_mm(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, "
                                "ScalarType out_dtype=bfloat16, int[]? scale_granularity=None, Tensor? bias=None) "
                                "-> Tensor", _fp8_blockwise_scaled_mm, _fp8_blockwise_scaled_mm_fake),
    "fp8_blockwise_grouped_mm": ("fp8_blockwise_grouped_mm(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, "
                                 "Tensor masked_m, ScalarType out_dtype=bfloat16, int[]? scale_granularity=None, "
                                 "int? expected_m=None) -> Tensor", _fp8_blockwise_grouped_mm,
                                 _fp8_blockwise_grouped_mm_fake),
    "fp8_blockwise_grouped_mm_contiguous": (
        "fp8_blockwise_grouped_mm_contiguous(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor m_indices, "
        "ScalarType out_dtype=bfloat16, int[]? scale_granularity=None) -> Tensor",
        _fp8_blockwise_grouped_mm_contiguous, _fp8_blockwise_grouped_mm_contiguous_fake),
    "quantized_mm": ("quantized_mm(Tensor x, Tensor w_packed, float scale, int bits, Tensor? group_scales=None, "
                     "ScalarType? out_dtype=None, Tensor? bias=None) -> Tensor", _quantized_mm, _quantized_mm_fake),
    "awq_gemm": ("awq_gemm(Tensor x, Tensor qweight, Tensor scales, Tensor qzeros, Tensor? bias=None) -> Tensor",
                 _awq_gemm, _awq_gemm_fake),
    "awq_linear": ("awq_linear(Tensor x, Tensor qweight, Tensor scales, Tensor qzeros, Tensor? bias=None) -> Tensor",
                   _awq_linear, _awq_linear_fake),
    "awq_blob_linear": ("awq_blob_linear(Tensor x, Tensor blob, Tensor scales, Tensor qzeros, Tensor? bias=None) "
                        "-> Tensor", _awq_blob_linear, _awq_blob_linear_fake),
    "awq_dequantize": ("awq_dequantize(Tensor qweight, Tensor scales, Tensor qzeros) -> Tensor", _awq_dequantize,
                       _awq_dequantize_fake),
    "dequantize_weights": ("dequantize_weights(Tensor w_packed, int bits, int k, Tensor? group_scales=None, "
                           "ScalarType dtype=bfloat16) -> Tensor", _dequantize_weights, _dequantize_weights_fake),
    "per_token_quant_int8": ("per_token_quant_int8(Tensor x) -> (Tensor, Tensor)", _per_token_quant_int8,
                             _per_token_quant_int8_fake),
    # a separate op, not a flag: its output count differs (vLLM: scaled_int8_quant(x, symmetric=False))
    "per_token_quant_int8_azp": ("per_token_quant_int8_azp(Tensor x) -> (Tensor, Tensor, Tensor)",
                                 _per_token_quant_int8_azp, _per_token_quant_int8_azp_fake),
    "per_token_group_quant_fp8": ("per_token_group_quant_fp8(Tensor x, int group=128) -> (Tensor, Tensor)",
                                  _per_token_group_quant_fp8, _per_token_group_quant_fp8_fake),
    "per_token_quant_fp8": ("per_token_quant_fp8(Tensor x) -> (Tensor, Tensor)", _per_token_quant_fp8,
                            _per_token_quant_fp8_fake),
}
for _schema, _impl, _fake in SCHEMAS.values():
    _register(_schema, _impl, _fake)
REGISTERED = tuple(SCHEMAS)


# -------------------------------------------------------------------------------------------------------- autograd
# The same rules as the plain functions (``autograd.py``): d x (and d bias) through the dequantized
# weight; a gradient asked of any other input raises when backward reaches the op.
_ARG_NAMES = {name: [a.split("=")[0].split()[-1] for a in schema.split("(", 1)[1].split(") -> ", 1)[0].split(", ")]
              for name, (schema, _, _) in SCHEMAS.items()}


def _refuse_others(ctx, op: str, differentiable: tuple = ()) -> None:
    refuse_undifferentiable(op, _ARG_NAMES[op], ctx.needs_input_grad, differentiable)


def _keep_weights(ctx, inputs, output):
    """Every op's context: its tensor inputs after the first (the weights and scales) and the first's dtype."""
    ctx.save_for_backward(*[t if isinstance(t, Tensor) else None for t in inputs[1:]])
    ctx.others = [None if isinstance(t, Tensor) else t for t in inputs[1:]]
    ctx.x_dtype = inputs[0].dtype
    ctx.in_features = inputs[0].shape[-1] if inputs[0].dim() else None  # awq_blob_linear: qweight's IC


def _inputs(ctx, op: str) -> list:
    """The op's inputs after the first, trailing ones left at their default (None for every differentiable op's)
    included."""
    given = [t if o is None else o for t, o in zip(ctx.saved_tensors, ctx.others)]
    return given + [None] * (len(_ARG_NAMES[op]) - 1 - len(given))


def _needs(ctx, index: int) -> bool:
    """``ctx.needs_input_grad[index]``; trailing arguments left at their defaults are not in it."""
    return index < len(ctx.needs_input_grad) and ctx.needs_input_grad[index]


def _grads(ctx, *grads) -> tuple:
    return grads[:len(ctx.needs_input_grad)]


def _quantized_mm_backward(ctx, grad):
    _refuse_others(ctx, "quantized_mm", ("x", "bias"))
    w_packed, scale, bits, group_scales, _, bias = _inputs(ctx, "quantized_mm")
    k = w_packed.shape[1] * 8 // bits
    grad_x = quantized_grad_x(grad, w_packed, scale, bits, k, group_scales, ctx.x_dtype) if _needs(ctx, 0) else None
    grad_bias = bias_grad(grad).to(bias.dtype) if _needs(ctx, 6) else None
    return _grads(ctx, grad_x, None, None, None, None, None, grad_bias)


def _awq_backward(op: str):
    """awq_gemm / awq_linear (the same arguments): d x through the dequantized weight, d bias."""
    def backward(ctx, grad):
        _refuse_others(ctx, op, ("x", "bias"))
        qweight, scales, qzeros, bias = _inputs(ctx, op)
        grad_x = awq_grad_x(grad, qweight, scales, qzeros, ctx.x_dtype) if _needs(ctx, 0) else None
        grad_bias = bias_grad(grad).to(bias.dtype) if _needs(ctx, 4) else None
        return _grads(ctx, grad_x, None, None, None, grad_bias)

    return backward


def _awq_blob_backward(ctx, grad):
    """awq_blob_linear: as awq_linear's, qweight rebuilt from the blob (exact)."""
    _refuse_others(ctx, "awq_blob_linear", ("x", "bias"))
    blob, scales, qzeros, bias = _inputs(ctx, "awq_blob_linear")
    grad_x = None
    if _needs(ctx, 0):
        from .weight_only.awq_sm90 import qweight_from_blob

        qweight = qweight_from_blob(blob, ctx.in_features, scales.shape[1])
        grad_x = awq_grad_x(grad, qweight, scales, qzeros, ctx.x_dtype)
    grad_bias = bias_grad(grad).to(bias.dtype) if _needs(ctx, 4) else None
    return _grads(ctx, grad_x, None, None, None, grad_bias)


def _bias_only_backward(op: str):
    """int8 / FP8 GEMMs: their quantized operands have no gradient; an output-dtype bias has d bias = sum of d out."""
    def backward(ctx, grad):
        _refuse_others(ctx, op, ("bias",))
        index = _ARG_NAMES[op].index("bias")
        grads = [None] * len(ctx.needs_input_grad)
        if _needs(ctx, index):
            grads[index] = bias_grad(grad).to(_inputs(ctx, op)[index - 1].dtype)
        return tuple(grads)

    return backward


def _no_backward(op: str):
    def backward(ctx, *grads):
        _refuse_others(ctx, op)
        return (None,) * len(ctx.needs_input_grad)

    return backward


_BACKWARDS = {"quantized_mm": _quantized_mm_backward, "awq_gemm": _awq_backward("awq_gemm"),
              "awq_linear": _awq_backward("awq_linear"), "awq_blob_linear": _awq_blob_backward,
              "int8_scaled_mm": _bias_only_backward("int8_scaled_mm"),
              "fp8_blockwise_scaled_mm": _bias_only_backward("fp8_blockwise_scaled_mm"),
              "fp8_scaled_mm": _bias_only_backward("fp8_scaled_mm")}
for _name in SCHEMAS:
    torch.library.register_autograd(f"{_NS}::{_name}", _BACKWARDS.get(_name, _no_backward(_name)),
                                    setup_context=_keep_weights, lib=_LIB)
