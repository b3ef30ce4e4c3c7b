"""GPU tier: the linear layers (cute_kernels/nn.py) against float64 references of what they compute (the same
quantized operands), against the float layer they were made from (loosely: the quantization error), compiled with
fullgraph=True against eager, and x's gradient through AwqLinear."""

import pytest
import torch
from torch import nn

from cute_kernels.formats.fp8 import quantize_fp8_per_token_group, quantize_fp8_rowwise
from cute_kernels.formats.int8 import quantize_int8_rowwise, quantize_int8_rowwise_asymmetric
from cute_kernels.nn import AwqLinear, Fp8Linear, Fp8RowwiseLinear, Int8Linear, QuantizedLinear
from cute_kernels.reference import (awq_gemm_ref, fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref,
                                    quantized_mm_ref)

pytestmark = pytest.mark.gpu
SHAPES = [(1, 1), (2, 8), (300,)]  # leading dims of x: decode, 16 tokens, 300 tokens


def _rel_err(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max()).item()


def _float_linear(i, o, dtype, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(i, o, device="cuda").to(dtype)


def _reference(layer, x2):
    """float64 [M, N] of what the layer computes from x2 [M, K] (its activation quantizer included)."""
    if isinstance(layer, AwqLinear):
        ref = awq_gemm_ref(x2, layer.qweight, layer.scales, layer.qzeros)
    elif isinstance(layer, QuantizedLinear):
        ref = quantized_mm_ref(x2, layer.w_packed, layer.scale, layer.bits, layer.group_scales)
    elif isinstance(layer, Int8Linear) and layer.activations == "asymmetric":
        q, s, azp = quantize_int8_rowwise_asymmetric(x2)
        ref = int8_scaled_mm_ref(q, layer.weight.t(), s, layer.weight_scale, azp_adj=layer.azp_adj, azp=azp)
    elif isinstance(layer, Int8Linear):
        q, s = quantize_int8_rowwise(x2)
        ref = int8_scaled_mm_ref(q, layer.weight.t(), s, layer.weight_scale)
    elif isinstance(layer, Fp8RowwiseLinear):
        q, s = quantize_fp8_rowwise(x2)
        ref = int8_scaled_mm_ref(q, layer.weight.t(), s, layer.weight_scale)  # the same formula on FP8 codes
    else:
        a, a_s = quantize_fp8_per_token_group(x2, 128)
        ref = fp8_blockwise_scaled_mm_ref(a, layer.weight, a_s, layer.weight_scale_inv, (1, 128, 128))
    return ref if layer.bias is None else ref + layer.bias.double()


LAYERS = {  # name: (make from a float linear, x dtype, tolerance vs the reference, bound vs the float layer)
    "awq g128 fp16": (lambda lin: AwqLinear.from_linear(lin, 128), torch.float16, 2e-3, 0.15),
    "awq g64 bf16": (lambda lin: AwqLinear.from_linear(lin, 64), torch.bfloat16, 1.5e-2, 0.15),
    "int4 g128 bf16": (lambda lin: QuantizedLinear.from_linear(lin, 4, 128), torch.bfloat16, 1.5e-2, 0.2),
    "int2 fp16": (lambda lin: QuantizedLinear.from_linear(lin, 2), torch.float16, 2e-3, None),
    "int8 fp32 x": (lambda lin: QuantizedLinear.from_linear(lin, 8, dtype=torch.float32), torch.float32, 1e-4, 0.02),
    "w8a8 bf16": (lambda lin: Int8Linear.from_linear(lin), torch.bfloat16, 1e-2, 0.03),
    "w8a8 fp16": (lambda lin: Int8Linear.from_linear(lin), torch.float16, 2e-3, 0.03),
    "w8a8 asym bf16": (lambda lin: Int8Linear.from_linear(lin, activations="asymmetric"), torch.bfloat16, 1e-2, 0.03),
    "w8a8 asym fp16": (lambda lin: Int8Linear.from_linear(lin, activations="asymmetric"), torch.float16, 2e-3, 0.03),
    "fp8 bf16": (lambda lin: Fp8Linear.from_linear(lin), torch.bfloat16, 1e-2, 0.1),
    "fp8 rowwise bf16": (lambda lin: Fp8RowwiseLinear.from_linear(lin), torch.bfloat16, 1e-2, 0.1),
    "fp8 rowwise fp16": (lambda lin: Fp8RowwiseLinear.from_linear(lin), torch.float16, 1e-2, 0.1),
}


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("lead", SHAPES)
def test_layer_against_references(name, lead):
    make, dtype, tol, float_bound = LAYERS[name]
    k, n = 1024, 1032
    lin = _float_linear(k, n, dtype)
    layer = make(lin)
    x = torch.randn(*lead, k, device="cuda").to(dtype)
    out = layer(x)
    assert out.shape == (*lead, n) and out.dtype == dtype
    x2 = x.reshape(-1, k)
    err = _rel_err(out.reshape(-1, n), _reference(layer, x2))
    assert err < tol, f"{name} x {tuple(x.shape)}: error {err:.2e} against its float64 reference"
    if float_bound is not None:
        err = _rel_err(out, lin(x).float())
        assert err < float_bound, f"{name}: {err:.3f} from the float layer"


@pytest.mark.parametrize("name", ["awq g128 fp16", "int4 g128 bf16", "w8a8 bf16", "w8a8 asym bf16", "fp8 bf16",
                                  "fp8 rowwise bf16"])
def test_compiled_layer_equals_eager(name):
    make, dtype, _, _ = LAYERS[name]
    layer = make(_float_linear(512, 264, dtype))
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    for lead in ((3,), (2, 40)):
        x = torch.randn(*lead, 512, device="cuda").to(dtype)
        assert torch.equal(compiled(x), layer(x)), f"{name} {lead}"


def test_awq_layer_under_inductor_and_its_input_gradient():
    layer = AwqLinear.from_linear(_float_linear(512, 264, torch.float16), 128)
    x = torch.randn(4, 512, device="cuda", dtype=torch.float16)
    assert torch.equal(torch.compile(layer, fullgraph=True)(x), layer(x))
    xg = x.clone().requires_grad_()
    grad = torch.randn(4, 264, device="cuda", dtype=torch.float16)
    layer(xg).backward(grad)
    x64 = x.double().requires_grad_()
    awq_gemm_ref(x64, layer.qweight, layer.scales, layer.qzeros).backward(grad.double())
    assert _rel_err(xg.grad, x64.grad) < 2e-3


def test_asymmetric_int8_linear_on_offset_activations():
    """Activations centred away from zero (a GELU's output): the zero point spends all 256 codes on each row's
    range, so the asymmetric layer's error against the float layer is below the symmetric one's; its sums follow an
    in-place weight update."""
    lin = _float_linear(1024, 1032, torch.bfloat16, seed=3)
    x = torch.nn.functional.gelu(torch.randn(64, 1024, device="cuda") * 2).to(torch.bfloat16)
    ref = lin(x).float()
    sym, asym = Int8Linear.from_linear(lin), Int8Linear.from_linear(lin, activations="asymmetric")
    err_sym, err_asym = (((layer(x).float() - ref).norm() / ref.norm()).item() for layer in (sym, asym))
    assert err_asym < err_sym, (err_asym, err_sym)
    with torch.no_grad():
        asym.weight.neg_()  # the version counter moves: the next eager call re-sums
    assert _rel_err(asym(x).reshape(-1, 1032), _reference(asym, x)) < 1e-2
    assert torch.equal(asym.azp_adj, asym.weight.sum(1, dtype=torch.int32))
