"""GPU tier: torch.ops.cute_kernels.* under torch.compile (inductor, fullgraph) give the plain functions' results bit
for bit (the same kernels run), with dynamic token counts and CUDA graphs too; torch.library.opcheck passes."""

import pytest
import torch

import cute_kernels
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group

from .conftest import int8_gemm_inputs

pytestmark = pytest.mark.gpu
ops = torch.ops.cute_kernels


def _compiled(op, **kw):
    torch._dynamo.reset()
    return torch.compile(lambda *args: op(*args), fullgraph=True, **kw)


def _fp8(m, n, k, gran, seed=0):
    torch.manual_seed(seed)
    x, w = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    a, sa = quantize_fp8_blockwise(x) if gran[0] == 128 else quantize_fp8_per_token_group(x)
    b, sb = quantize_fp8_blockwise(w)
    return a, b, sa, sb


def _awq(ic, oc, g, dtype, seed=0):
    torch.manual_seed(seed)
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda"), g, scale_dtype=dtype)
    return qweight, scales, qzeros


@pytest.mark.parametrize("batch", [None, 3])
def test_int8_compiled_equals_plain(batch):
    a, b, sa, sb, bias = int8_gemm_inputs(37, 256, 512, batch=batch, out_dtype=torch.float16, seed=1)
    ref = cute_kernels.int8_scaled_mm(a, b, sa, sb, bias, torch.float16)
    out = _compiled(ops.int8_scaled_mm)(a, b, sa, sb, bias, torch.float16)
    assert out.shape == ref.shape and out.dtype == torch.float16 and torch.equal(out, ref)


@pytest.mark.parametrize("gran", [(1, 128, 128), (128, 128, 128)])
def test_fp8_compiled_equals_plain(gran):
    a, b, sa, sb = _fp8(70, 384, 512, gran)
    ref = cute_kernels.fp8_blockwise_scaled_mm(a, b, sa, sb, torch.bfloat16, gran)
    out = _compiled(ops.fp8_blockwise_scaled_mm)(a, b, sa, sb, torch.bfloat16, list(gran))
    assert torch.equal(out, ref)


@pytest.mark.parametrize("bits,m,group", [(4, 16, 128), (2, 1, None), (1, 40, None)])
def test_quantized_mm_compiled_equals_plain(bits, m, group):
    torch.manual_seed(bits + m)
    w_packed, scale, gs = quantize_weights(torch.randn(512, 1024, device="cuda"), bits, group)
    x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
    ref = cute_kernels.quantized_mm(x, w_packed, scale, bits, gs)
    out = _compiled(ops.quantized_mm)(x, w_packed, scale, bits, gs)
    assert torch.equal(out, ref)


def test_awq_ops_compiled_equal_plain():
    qweight, scales, qzeros = _awq(512, 200, 128, torch.float16)
    x = torch.randn(7, 512, device="cuda", dtype=torch.float16)
    assert torch.equal(_compiled(ops.awq_gemm)(x, qweight, scales, qzeros),
                       cute_kernels.awq_gemm(x, qweight, scales, qzeros))
    x3 = torch.randn(2, 5, 512, device="cuda", dtype=torch.float16)
    bias = torch.randn(200, device="cuda", dtype=torch.float16)
    out = _compiled(ops.awq_linear)(x3, qweight, scales, qzeros, bias)
    assert out.shape == (2, 5, 200) and torch.equal(out, cute_kernels.awq_linear(x3, qweight, scales, qzeros, bias))
    assert torch.equal(_compiled(ops.awq_dequantize)(qweight, scales, qzeros),
                       cute_kernels.awq_dequantize(qweight, scales, qzeros))


def test_dynamic_token_count():
    """One dynamic-shape graph serves several M; each result equals the plain call's."""
    a, b, sa, sb, bias = int8_gemm_inputs(300, 256, 512, seed=2)
    f = _compiled(ops.int8_scaled_mm, dynamic=True)
    for m in (300, 17, 1):
        assert torch.equal(f(a[:m], b, sa[:m], sb, bias), cute_kernels.int8_scaled_mm(a[:m], b, sa[:m], sb, bias))


class _AwqLayer(torch.nn.Module):
    """The weights as buffers, as a model holds them: CUDA graph trees treat them as static inputs (not copied)."""

    def __init__(self, qweight, scales, qzeros):
        super().__init__()
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales)
        self.register_buffer("qzeros", qzeros)

    def forward(self, x):
        return ops.awq_gemm(x, self.qweight, self.scales, self.qzeros)


@pytest.mark.parametrize("op", ["int8_split_k", "awq_decode", "awq_wgmma"])
def test_reduce_overhead_mode_replays_with_new_inputs(op):
    """mode="reduce-overhead" runs the op inside inductor's CUDA graph trees, which reject tensors left in their pool
    that outlive a graph: the split-K scratch and the AWQ / WGMMA weight layouts the ops cache must come from the
    regular pool (streams.build_outside_graph_pools). Replays must read the new inputs."""
    torch.manual_seed(7)
    torch._dynamo.reset()
    if op == "int8_split_k":
        f = torch.compile(ops.int8_scaled_mm, mode="reduce-overhead", fullgraph=True)
        runs = [int8_gemm_inputs(16, 4096, 4096, seed=seed) for seed in (3, 4, 5)]  # split over K (wave model)
        plain = cute_kernels.int8_scaled_mm
    else:
        weights = _awq(4096, 4096, 128, torch.float16)
        f = torch.compile(_AwqLayer(*weights), mode="reduce-overhead", fullgraph=True)
        m = 4 if op == "awq_decode" else 40
        runs = [(torch.randn(m, 4096, device="cuda", dtype=torch.float16),) for _ in range(3)]

        def plain(x):
            return cute_kernels.awq_gemm(x, *weights)
    for args in runs:
        out = f(*args).clone()
        assert torch.equal(out, plain(*args))


def test_opcheck():
    a, b, sa, sb, bias = int8_gemm_inputs(33, 128, 256, seed=6)
    torch.library.opcheck(ops.int8_scaled_mm.default, (a, b, sa, sb, bias, torch.bfloat16))
    fa, fb, fsa, fsb = _fp8(33, 256, 256, (1, 128, 128))
    # torch's schema check compares inputs before / after with allclose, which float8 tensors do not implement
    torch.library.opcheck(ops.fp8_blockwise_scaled_mm.default, (fa, fb, fsa, fsb, torch.bfloat16, None),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    w_packed, scale, gs = quantize_weights(torch.randn(128, 256, device="cuda"), 4, 64)
    x = torch.randn(9, 256, device="cuda", dtype=torch.float16)
    torch.library.opcheck(ops.quantized_mm.default, (x, w_packed, scale, 4, gs, None))
    qweight, scales, qzeros = _awq(256, 64, 64, torch.float16)
    torch.library.opcheck(ops.awq_gemm.default, (x, qweight, scales, qzeros))
    torch.library.opcheck(ops.awq_linear.default, (x.view(3, 3, 256), qweight, scales, qzeros, None))
    torch.library.opcheck(ops.awq_dequantize.default, (qweight, scales, qzeros))
    torch.library.opcheck(ops.dequantize_weights.default, (w_packed, 4, 256, gs, torch.float16))
    torch.library.opcheck(ops.per_token_quant_int8.default, (x.view(3, 3, 256),))
    torch.library.opcheck(ops.per_token_group_quant_fp8.default, (x.view(3, 3, 256), 128),
                          test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))
    # with inputs that require grad: the autograd registrations (cute_kernels/autograd.py) are checked too
    torch.library.opcheck(ops.quantized_mm.default, (x.clone().requires_grad_(), w_packed, scale, 4, gs, None))
    torch.library.opcheck(ops.awq_linear.default, (x.view(3, 3, 256).clone().requires_grad_(), qweight, scales, qzeros,
                                                   torch.randn(64, device="cuda", dtype=torch.float16,
                                                               requires_grad=True)))


def test_new_arguments_compiled_equal_plain():
    """int8's zero points (azp_adj / azp), FP8's and awq_gemm's bias through torch.compile; opcheck with them; the
    int8 / FP8 bias gradient (the only one those ops have) under compile equals eager."""
    a, b, sa, sb, bias = int8_gemm_inputs(37, 256, 512, seed=9)
    azp_adj, azp = b.sum(0, dtype=torch.int32), torch.randint(-128, 128, (37,), dtype=torch.int32, device="cuda")
    ref = cute_kernels.int8_scaled_mm(a, b, sa, sb, bias, azp_adj=azp_adj, azp=azp)
    assert torch.equal(_compiled(ops.int8_scaled_mm)(a, b, sa, sb, bias, torch.bfloat16, azp_adj, azp), ref)
    torch.library.opcheck(ops.int8_scaled_mm.default, (a, b, sa, sb, bias, torch.bfloat16, azp_adj, azp))

    fa, fb, fsa, fsb = _fp8(70, 384, 512, (1, 128, 128))
    fbias = torch.randn(384, device="cuda", dtype=torch.bfloat16)
    ref = cute_kernels.fp8_blockwise_scaled_mm(fa, fb, fsa, fsb, torch.bfloat16, bias=fbias)
    assert torch.equal(_compiled(ops.fp8_blockwise_scaled_mm)(fa, fb, fsa, fsb, torch.bfloat16, None, fbias), ref)
    torch.library.opcheck(ops.fp8_blockwise_scaled_mm.default, (fa, fb, fsa, fsb, torch.bfloat16, None, fbias),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))

    qweight, scales, qzeros = _awq(512, 200, 128, torch.float16)
    x = torch.randn(7, 512, device="cuda", dtype=torch.float16)
    abias = torch.randn(200, device="cuda", dtype=torch.float16)
    ref = cute_kernels.awq_gemm(x, qweight, scales, qzeros, bias=abias)
    assert torch.equal(_compiled(ops.awq_gemm)(x, qweight, scales, qzeros, abias), ref)
    torch.library.opcheck(ops.awq_gemm.default, (x, qweight, scales, qzeros, abias))

    for op, args in ((ops.int8_scaled_mm, (a, b, sa, sb)), (ops.fp8_blockwise_scaled_mm, (fa, fb, fsa, fsb))):
        n = args[1].shape[-1] if op is ops.int8_scaled_mm else args[1].shape[0]
        p = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        tail = (p, torch.bfloat16) if op is ops.int8_scaled_mm else (torch.bfloat16, None, p)
        eager = op(*args, *tail)
        (g_eager,) = torch.autograd.grad(eager.float().square().sum(), p)
        compiled = _compiled(op)(*args, *tail)
        (g_comp,) = torch.autograd.grad(compiled.float().square().sum(), p)
        assert torch.allclose(g_eager.float(), g_comp.float(), rtol=1e-2, atol=1e-2)
        ref = (2 * eager.float()).sum(0)  # d/d bias of sum(out^2) = 2 out summed over the tokens
        assert torch.allclose(g_eager.float(), ref.float(), rtol=2e-2, atol=1e-1)
