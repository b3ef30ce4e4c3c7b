"""GPU tier: autograd of the ops (cute_kernels/autograd.py). The weight-only GEMMs on every path by token count
(decode, WGMMA, tensor-core / dense) with x requiring grad: the forward equals the plain call bit for bit and d x
(d bias) match float64 autograd of the references; the ops without a backward run and then refuse it loudly; the
torch.ops registrations through a compiled training step."""

import pytest
import torch

from cute_kernels import (awq_gemm, awq_linear, fp8_blockwise_scaled_mm, int8_scaled_mm, quantized_mm)
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from tests.conftest import int8_gemm_inputs

pytestmark = pytest.mark.gpu
ops = torch.ops.cute_kernels
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2, torch.float32: 1e-3}


def _rel_err(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def _grads(call, x, grad_out, *others):
    """(out, d x, d others) of ``call(x, *others)`` with x (and others) requiring grad; also checks the forward
    against the same call without autograd."""
    with torch.no_grad():
        plain = call(x, *others)
    leaves = [t.detach().clone().requires_grad_() for t in (x, *others)]
    out = call(*leaves)
    assert out.requires_grad and torch.equal(out.detach(), plain), "the recorded forward differs from the plain call"
    out.backward(grad_out)
    return [t.grad for t in leaves]


@pytest.mark.parametrize("m", [1, 16, 300])  # decode path, WGMMA path, WGMMA / dense by op
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_awq_backward(m, dtype):
    ic, oc = 1024, 1032
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda"), 128, scale_dtype=dtype)
    x = torch.randn(m, ic, device="cuda").to(dtype)
    bias = torch.randn(oc, device="cuda").to(dtype)
    grad_out = torch.randn(m, oc, device="cuda").to(dtype)
    x64 = x.double().requires_grad_()
    awq_gemm_ref(x64, qweight, scales, qzeros).backward(grad_out.double())
    lead = (2, m // 2) if m % 2 == 0 else (m,)
    calls = {
        "awq_gemm": lambda x: awq_gemm(x, qweight, scales, qzeros),
        "awq_linear": lambda x, b: awq_linear(x.view(*lead, ic), qweight, scales, qzeros, b).view(m, oc),
        "awq_linear dense": lambda x, b: awq_linear(x, qweight, scales, qzeros, b, dense_min_tokens=1),
        "torch.ops awq_linear": lambda x, b: ops.awq_linear(x, qweight, scales, qzeros, b),
    }
    for name, call in calls.items():
        others = (bias,) if "linear" in name else ()
        grads = _grads(call, x, grad_out, *others)
        err = _rel_err(grads[0], x64.grad)
        assert err < TOL[dtype], f"{name} M={m} {dtype}: d x error {err:.2e}"
        if others:
            assert _rel_err(grads[1], grad_out.double().sum(0)) < TOL[dtype], f"{name}: d bias"


@pytest.mark.parametrize("m", [1, 16, 300])
@pytest.mark.parametrize("bits,group,x_dtype,out_dtype", [
    (4, 128, torch.float16, None), (4, 128, torch.bfloat16, torch.float32), (2, None, torch.bfloat16, None),
    (8, None, torch.float16, None), (1, 64, torch.float32, None)])
def test_quantized_mm_backward(m, bits, group, x_dtype, out_dtype):
    n, k = 264, 512
    w_packed, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
    x = torch.randn(m, k, device="cuda").to(x_dtype)
    grad_out = torch.randn(m, n, device="cuda").to(out_dtype or x_dtype)
    x64 = x.double().requires_grad_()
    quantized_mm_ref(x64, w_packed, scale, bits, gs).backward(grad_out.double())
    for name, call in (("quantized_mm", lambda x: quantized_mm(x, w_packed, scale, bits, gs, out_dtype)),
                       ("torch.ops quantized_mm", lambda x: ops.quantized_mm(x, w_packed, scale, bits, gs,
                                                                              out_dtype))):
        (grad_x,) = _grads(call, x, grad_out)
        assert grad_x.dtype == x_dtype
        err = _rel_err(grad_x, x64.grad)
        assert err < TOL[x_dtype] * (2 if bits == 1 else 1), f"{name} M={m} {bits}-bit {x_dtype}: error {err:.2e}"


def test_weight_scales_refuse_a_gradient():
    qweight, qzeros, scales = awq_quantize(torch.randn(512, 256, device="cuda"), 128)
    x = torch.randn(16, 512, device="cuda", dtype=torch.float16, requires_grad=True)
    out = awq_gemm(x, qweight, scales.clone().requires_grad_(), qzeros)
    with pytest.raises(NotImplementedError, match="awq_gemm has no backward for scales"):
        out.sum().backward()
    w_packed, scale, gs = quantize_weights(torch.randn(256, 512, device="cuda"), 4, 128)
    out = quantized_mm(x, w_packed, scale, 4, gs.clone().requires_grad_())
    with pytest.raises(NotImplementedError, match="quantized_mm has no backward for group_scales"):
        out.sum().backward()


@pytest.mark.parametrize("m", [3, 200])
def test_int8_and_fp8_run_with_grad_and_refuse_backward(m):
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, 264, 256, seed=m)
    plain = int8_scaled_mm(a, b, a_s, b_s, bias)
    out = int8_scaled_mm(a, b, a_s.clone().requires_grad_(), b_s, bias)
    assert out.requires_grad and torch.equal(out.detach(), plain)
    with pytest.raises(NotImplementedError, match="int8_scaled_mm has no backward for a_scale"):
        out.float().sum().backward()
    fa, fa_s = quantize_fp8_per_token_group(torch.randn(m, 256, device="cuda"), 128)
    fb, fb_s = quantize_fp8_blockwise(torch.randn(264, 256, device="cuda"), 128)
    fa_s, fb_s = to_mn_major(fa_s), to_mn_major(fb_s)
    plain = fp8_blockwise_scaled_mm(fa, fb, fa_s, fb_s)
    out = fp8_blockwise_scaled_mm(fa, fb, fa_s, fb_s.clone().requires_grad_())
    assert out.requires_grad and torch.equal(out.detach(), plain)
    with pytest.raises(NotImplementedError, match="fp8_blockwise_scaled_mm has no backward for b_scale"):
        out.float().sum().backward()


def test_compiled_training_step():
    """A LoRA-style step: a frozen AWQ layer plus a trainable low-rank adapter, compiled with fullgraph=True; the
    gradients of x and of the adapter equal eager autograd's."""
    ic, oc, rank = 512, 256, 8
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda"), 128)
    lora_a = (torch.randn(ic, rank, device="cuda") * 0.05).half().requires_grad_()
    lora_b = (torch.randn(rank, oc, device="cuda") * 0.05).half().requires_grad_()

    def step(x):
        y = ops.awq_linear(x, qweight, scales, qzeros, None) + (x @ lora_a) @ lora_b
        return y.float().pow(2).mean()

    x = torch.randn(4, 24, ic, device="cuda", dtype=torch.float16)
    results = []
    for fn in (step, torch.compile(step, fullgraph=True, backend="aot_eager")):
        xg = x.clone().requires_grad_()
        lora_a.grad = lora_b.grad = None
        fn(xg).backward()
        results.append((xg.grad, lora_a.grad.clone(), lora_b.grad.clone()))
    for eager, compiled in zip(*results):
        assert _rel_err(compiled, eager) < 1e-3
