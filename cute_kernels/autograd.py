"""Autograd for the ops: gradients flow to the activations of the weight-only GEMMs; the rest refuse loudly.

The kernels are inference kernels, but two training setups call them with tensors that require grad:
* Adapters on a quantized base (LoRA / QLoRA on an AWQ or low-bit checkpoint): the base weight is frozen, yet the
  gradient must flow *through* the layer to everything before it. ``quantized_mm``, ``awq_gemm`` and ``awq_linear``
  therefore have a backward for x (and for their bias): d x = d out @ W, with W the dequantized weight,
  rebuilt by the dequantize kernel in the backward pass only (nothing is kept from the forward but the weight
  tensors themselves). Without it a kernel output carries no graph, and the gradients upstream of the layer
  silently lose its contribution - while awq_linear's dense path (torch.matmul) did have one.
* A gradient asked of anything else - the quantized weights' scales, int8 / FP8 operands and scales, a dequantized
  weight - has no backward here: the output then carries a node that raises ``NotImplementedError`` naming the op
  and the argument when backward reaches it. Inference calls with such tensors (a scale kept as an
  ``nn.Parameter`` that still requires grad) run as before, except with ``out=``, which is refused then (as
  torch's own out= variants are: no graph through a caller's buffer).
The check costs ~0.25 µs of host time per call with grad mode on (this CPU), ~0.1 µs under ``torch.no_grad()`` /
``torch.inference_mode()`` (serving code runs there).
The ``torch.ops.cute_kernels`` ops register the same backward passes (``torch_ops``), so compiled training graphs
get them too.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch._C import is_grad_enabled as _grad_enabled


def needs_grad(*tensors) -> bool:
    """Whether autograd must record this call: grad mode is on and some argument is a tensor that requires grad.
    (A plain loop: about half the host time of ``any`` over a generator, ~0.25 µs with grad mode on.)"""
    if not _grad_enabled():
        return False
    for t in tensors:
        if getattr(t, "requires_grad", False):
            return True
    return False


def refuse_out(op: str, out) -> None:
    if out is not None:
        raise ValueError(f"out: {op} with out= does not record gradients, but an argument requires grad (as torch's "
                         f"out= variants: drop out=, or call under torch.no_grad())")


def no_backward_error(op: str, names: Sequence[str]) -> NotImplementedError:
    return NotImplementedError(
        f"{op} has no backward for {', '.join(names)} (cute_kernels' inference kernels differentiate only the "
        f"activations of quantized_mm / awq_gemm / awq_linear, and the ops' bias); call requires_grad_(False) on "
        f"{'it' if len(names) == 1 else 'them'} or detach()")


def refuse_undifferentiable(op: str, names: Sequence[str], needed: Sequence[bool], differentiable) -> None:
    """Raise ``no_backward_error`` if a gradient is asked (``needed``) of an input outside ``differentiable``."""
    refused = [name for name, need in zip(names, needed) if need and name not in differentiable]
    if refused:
        raise no_backward_error(op, refused)


class _Recorded(torch.autograd.Function):
    """out = run() (the kernel); backward: ``grads(grad_out, needs_input_grad)`` -> one gradient per input."""

    @staticmethod
    def forward(ctx, run: Callable, grads: Callable, *inputs):
        ctx.grads = grads
        return run()

    @staticmethod
    def backward(ctx, grad_out):
        return (None, None, *ctx.grads(grad_out, ctx.needs_input_grad[2:]))


def record(op: str, run: Callable, names: Sequence[str], inputs: Sequence, differentiable: dict) -> torch.Tensor:
    """Run ``run()`` under autograd. ``inputs`` (named ``names``) are the call's arguments; ``differentiable`` maps
    an input's name to a function of the output's gradient returning that input's gradient. An input outside it that
    requires grad makes backward raise (``no_backward_error``)."""

    def grads(grad_out, needed):
        refuse_undifferentiable(op, names, needed, differentiable)
        return [differentiable[name](grad_out) if need else None for name, need in zip(names, needed)]

    return _Recorded.apply(run, grads, *inputs)


# ------------------------------------------------------------------------------------------ backward formulas
# Both go through the ``torch.ops.cute_kernels`` dequantize ops (the plain functions in eager code, their fake
# implementations when a compiled graph traces the backward).
def awq_grad_x(grad_out: torch.Tensor, qweight, scales, qzeros, x_dtype: torch.dtype) -> torch.Tensor:
    """d x [.., IC] of out = x @ W (W = awq_dequantize [IC, OC], in x's dtype as the forward rounds it)."""
    w = torch.ops.cute_kernels.awq_dequantize(qweight, scales, qzeros)
    return torch.matmul(grad_out.to(w.dtype), w.t()).to(x_dtype)


def bias_grad(grad_out: torch.Tensor) -> torch.Tensor:
    """d bias [N] of out = ... + bias: the output gradient summed over every token."""
    return grad_out.reshape(-1, grad_out.shape[-1]).sum(0)


def quantized_grad_x(grad_out: torch.Tensor, w_packed, scale: float, bits: int, k: int, group_scales,
                     x_dtype: torch.dtype) -> torch.Tensor:
    """d x [M, K] of out = scale * x @ W^T (W = the decoded [N, K] weight times its group scales). fp16 / bf16 x: W
    from the dequantize kernel in x's dtype; fp32 x: the codes (exact in bf16) times the group scales in fp32."""
    dequantize = torch.ops.cute_kernels.dequantize_weights
    if x_dtype == torch.float32:
        w = dequantize(w_packed, bits, k, None, torch.bfloat16).float()
        if group_scales is not None:
            w = w * group_scales.float().repeat_interleave(k // group_scales.shape[1], dim=1)
    else:
        w = dequantize(w_packed, bits, k, group_scales, x_dtype)
    return (torch.matmul(grad_out.to(w.dtype), w) * scale).to(x_dtype)
