"""CPU tier: autograd of the ops (cute_kernels/autograd.py, the torch.ops registrations in torch_ops.py).

What runs without a GPU: the backward formulas (through the dequantize ops' CPU references) against float64 autograd
of the references, the recording plumbing, the no-backward ops on CPU tensors, the out= refusal, and the registered
backward passes traced on fake tensors (what a compiled training graph does)."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import cute_kernels
from cute_kernels.autograd import awq_grad_x, quantized_grad_x, record
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref

ops = torch.ops.cute_kernels


def _rel_err(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_awq_grad_x_against_float64_autograd(dtype):
    torch.manual_seed(0)
    qweight, qzeros, scales = awq_quantize(torch.randn(256, 72), 64, scale_dtype=dtype)
    x = torch.randn(2, 3, 256).to(dtype)
    grad_out = torch.randn(2, 3, 72).to(dtype)
    x64 = x.double().requires_grad_()
    awq_gemm_ref(x64, qweight, scales, qzeros).backward(grad_out.double())
    got = awq_grad_x(grad_out, qweight, scales, qzeros, dtype)
    assert got.dtype == dtype and got.shape == x.shape
    assert _rel_err(got, x64.grad) < {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}[dtype]


@pytest.mark.parametrize("bits,group", [(4, 64), (2, None), (8, 128), (1, 32)])
@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_quantized_grad_x_against_float64_autograd(bits, group, x_dtype):
    torch.manual_seed(bits)
    k = 256
    w_packed, scale, gs = quantize_weights(torch.randn(40, k), bits, group)
    grad_out = torch.randn(5, 40)  # fp32 (out_dtype=float32), cast by the formula
    x64 = torch.randn(5, k, dtype=torch.float64, requires_grad=True)
    quantized_mm_ref(x64, w_packed, scale, bits, gs).backward(grad_out.double())
    got = quantized_grad_x(grad_out, w_packed, scale, bits, k, gs, x_dtype)
    assert got.dtype == x_dtype and got.shape == (5, k)
    tol = {torch.float16: 3e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5}[x_dtype]
    assert _rel_err(got, x64.grad) < tol


def test_record_maps_gradients_and_refuses_the_rest():
    x = torch.randn(4, requires_grad=True)
    s = torch.randn(4)
    out = record("op", lambda: x.detach() * 2, ("x", "s"), (x, s), {"x": lambda g: g * 3})
    assert out.requires_grad
    out.sum().backward()
    assert torch.equal(x.grad, torch.full((4,), 3.0))
    s.requires_grad_()
    out = record("op", lambda: x.detach() * 2, ("x", "s"), (x, s), {"x": lambda g: g * 3})
    with pytest.raises(NotImplementedError, match=r"op has no backward for s\b"):
        out.sum().backward()


def test_dequantize_ops_have_no_backward():
    """On CPU tensors both dequantize ops run their references; scales that require grad give the same values and a
    backward that raises, naming the op and the argument - plain functions and torch.ops alike."""
    qweight, qzeros, scales = awq_quantize(torch.randn(128, 16), 64)
    w_packed, _, gs = quantize_weights(torch.randn(16, 128), 4, 64)
    calls = [("awq_dequantize", "scales", scales, lambda s: cute_kernels.awq_dequantize(qweight, s, qzeros)),
             ("awq_dequantize", "scales", scales, lambda s: ops.awq_dequantize(qweight, s, qzeros)),
             ("dequantize_weights", "group_scales", gs, lambda g: cute_kernels.dequantize_weights(w_packed, 4, 128, g)),
             ("dequantize_weights", "group_scales", gs, lambda g: ops.dequantize_weights(w_packed, 4, 128, g))]
    for op, name, t, call in calls:
        plain = call(t)
        tg = t.clone().requires_grad_()
        with torch.no_grad():
            assert not call(tg).requires_grad
        out = call(tg)
        assert out.requires_grad and torch.equal(out.detach(), plain)
        with pytest.raises(NotImplementedError, match=f"{op} has no backward for {name}"):
            out.float().sum().backward()


def test_out_is_refused_when_gradients_are_recorded():
    """As torch's out= variants: no graph through a caller's buffer. Checked before anything else, so on CPU too."""
    x = torch.randn(3, 128, dtype=torch.float16, requires_grad=True)
    w_packed, scale, _ = quantize_weights(torch.randn(16, 128), 4)
    with pytest.raises(ValueError, match="^out: quantized_mm with out="):
        cute_kernels.quantized_mm(x, w_packed, scale, 4, out=torch.empty(3, 16, dtype=torch.float16))
    qweight, qzeros, scales = awq_quantize(torch.randn(128, 16), 64)
    with pytest.raises(ValueError, match="^out: awq_gemm with out="):
        cute_kernels.awq_gemm(x, qweight, scales, qzeros, out=torch.empty(3, 16, dtype=torch.float16))
    a = torch.zeros(3, 64, dtype=torch.int8)
    b = torch.zeros(16, 64, dtype=torch.int8).t()
    with pytest.raises(ValueError, match="^out: int8_scaled_mm with out="):
        cute_kernels.int8_scaled_mm(a, b, torch.ones(3, requires_grad=True), torch.ones(16),
                                    out=torch.empty(3, 16, dtype=torch.bfloat16))


def test_cpu_tensors_with_grad_still_get_the_device_error():
    x = torch.randn(3, 128, dtype=torch.float16, requires_grad=True)
    qweight, qzeros, scales = awq_quantize(torch.randn(128, 16), 64)
    with pytest.raises(ValueError, match="CUDA"):
        cute_kernels.awq_gemm(x, qweight, scales, qzeros)


def test_registered_backward_traces_on_fake_tensors():
    """What AOTAutograd does for a compiled training step: forward and backward of the torch.ops on fake tensors,
    the backward through the dequantize ops' fake implementations."""
    with FakeTensorMode():
        qweight = torch.empty(256, 8, dtype=torch.int32)
        scales, qzeros = torch.empty(2, 64, dtype=torch.float16), torch.empty(2, 8, dtype=torch.int32)
        x = torch.empty(2, 3, 256, dtype=torch.float16, requires_grad=True)
        bias = torch.empty(64, dtype=torch.float16, requires_grad=True)
        ops.awq_linear(x, qweight, scales, qzeros, bias).sum().backward()
        assert x.grad.shape == x.shape and bias.grad.shape == bias.shape
        ops.awq_linear(x, qweight, scales, qzeros).sum().backward()  # bias left at its default: not in the context
        ops.quantized_mm(x[0], torch.empty(64, 128, dtype=torch.uint8), 0.5, 4).sum().backward()
        x2 = torch.empty(5, 256, dtype=torch.float32, requires_grad=True)
        w_packed, gs = torch.empty(64, 128, dtype=torch.uint8), torch.empty(64, 4, dtype=torch.float32)
        ops.quantized_mm(x2, w_packed, 0.5, 4, gs, None).sum().backward()
        assert x2.grad.shape == x2.shape and x2.grad.dtype == torch.float32
        sa = torch.empty(5, requires_grad=True)
        out = ops.int8_scaled_mm(torch.empty(5, 64, dtype=torch.int8), torch.empty(64, 16, dtype=torch.int8), sa,
                                 torch.empty(16))
        with pytest.raises(NotImplementedError, match="int8_scaled_mm has no backward for a_scale"):
            out.float().sum().backward()
