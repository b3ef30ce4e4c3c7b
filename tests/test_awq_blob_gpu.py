"""GPU tier (SM90): awq_blob_linear and AwqLinear's "sm90_blob" layout against the float64 reference and against the
checkpoint layout; what the layer holds; gradients; compiled calls. Tolerances as test_awq_gpu.py."""

import gc

import pytest
import torch

from cute_kernels.formats.awq import awq_quantize
from cute_kernels.nn import AwqLinear
from cute_kernels.reference import awq_gemm_ref
from cute_kernels.weight_only import awq_blob, awq_blob_linear, awq_sm90, clear_weight_caches

from .conftest import poisoned

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.fixture(autouse=True)
def _sm90_only():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("SM90 only: the blob is the layout of the H100 / H200 kernels")


def _checkpoint(ic, oc, g, dtype, seed):
    torch.manual_seed(seed)
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda"), g, scale_dtype=dtype)
    return qweight, scales, qzeros


def _err(out, ref):
    return ((out.double().cpu() - ref.cpu()).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,OC,IC,G", [
    (1, 200, 512, 128), (3, 1000, 512, 64), (5, 136, 4160, 64), (1, 14336, 4096, 128), (4, 4104, 4096, 128),
    (12, 4096, 4096, 128), (16, 1032, 1024, 32), (1, 1032, 1024, 32), (40, 200, 512, 512), (300, 4104, 4096, 128),
    (5000, 264, 512, 128)])
def test_blob_linear_against_reference(dtype, M, OC, IC, G):
    """Decode tiles on the blob at few tokens, the WGMMA path elsewhere (G = 32 at every M; above 4096 tokens, where
    awq_linear would dequantize); a new bias each call through the warm path; NaN-poisoned out."""
    qweight, scales, qzeros = _checkpoint(IC, OC, G, dtype, seed=M * 31 + OC + G)
    blob = awq_blob(qweight)
    x = torch.randn(M, IC, dtype=dtype, device="cuda")
    ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    for call in range(2):
        bias = (torch.randn(OC, device="cuda") * 2).to(dtype)
        out = poisoned((M, OC), dtype)
        awq_blob_linear(x, blob, scales, qzeros, bias, out=out)
        assert not out.isnan().any()
        assert _err(out, ref + bias.double().cpu()) < TOL[dtype], call
        fresh = awq_blob_linear(x, blob, scales, qzeros, bias)  # warm path (out=None)
        assert torch.equal(fresh, out)


def test_blob_linear_leading_dims_and_strided_x():
    qweight, scales, qzeros = _checkpoint(1024, 256, 128, torch.float16, seed=1)
    blob = awq_blob(qweight)
    x = torch.randn(2, 3, 1024 + 8, dtype=torch.float16, device="cuda")[..., 8:]  # rows 16-byte aligned, offset
    out = awq_blob_linear(x, blob, scales, qzeros)
    ref = awq_gemm_ref(x.reshape(-1, 1024).cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    assert out.shape == (2, 3, 256) and _err(out.reshape(-1, 256), ref) < TOL[torch.float16]
    odd = torch.randn(5, 1024 + 1, dtype=torch.float16, device="cuda")[:, 1:]  # not 16-byte aligned: copied
    ref = awq_gemm_ref(odd.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    assert _err(awq_blob_linear(odd, blob, scales, qzeros), ref) < TOL[torch.float16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_layouts_agree_and_what_they_hold(dtype):
    """Both layouts against float64 at 1 / 4 / 16 / 64 / 600 tokens; the GPU memory each holds after those calls, less
    the per-stream split-K workspace: blob layout = blob + scales + qzeros + zero points as bytes + the parameter
    words of the formats that ran (fp16: ``awq_fma`` to 512 tokens and ``awq`` above; bf16: ``awq``), to the byte;
    checkpoint layout > 2.9x qweight (repack, blob and words beside it). The blob's cache entry goes with the layer."""
    from cute_kernels.ops import split_k

    ic, oc, g = 4096, 4096, 128
    outs, held = {}, {}
    for layout in ("checkpoint", "sm90_blob"):
        clear_weight_caches()
        gc.collect()
        torch.cuda.synchronize()
        base, scratch = torch.cuda.memory_allocated(), split_k.SCRATCH.nbytes()
        torch.manual_seed(7)
        layer = AwqLinear.from_linear(torch.nn.Linear(ic, oc, bias=False, device="cuda"), g, dtype)
        layer.set_weight_layout_(layout)
        torch.cuda.synchronize()
        at_rest = torch.cuda.memory_allocated() - base
        outs[layout] = {}
        for m in (1, 4, 16, 64, 600):
            x = torch.randn(m, ic, dtype=dtype, device="cuda", generator=torch.Generator("cuda").manual_seed(m))
            outs[layout][m] = layer(x).cpu()
            ref = awq_gemm_ref(x.cpu(), layer.checkpoint_qweight().cpu(), layer.scales.cpu(), layer.qzeros.cpu())
            assert _err(outs[layout][m], ref) < TOL[dtype], (layout, m)
            del x
        torch.cuda.synchronize()
        held[layout] = (at_rest, torch.cuda.memory_allocated() - base - (split_k.SCRATCH.nbytes() - scratch))
        del layer
    for m in outs["checkpoint"]:  # one weight, two layouts whose kernels may differ: within the tolerance
        assert _err(outs["sm90_blob"][m], outs["checkpoint"][m].double()) < TOL[dtype]
    qweight_bytes, groups = ic * oc // 2, ic // g
    small = groups * oc * (2 + 0.5)  # scales, qzeros
    words = 4 + 8 if dtype == torch.float16 else 8  # bytes per (row, group): awq_fma's one word, awq's two
    expected = qweight_bytes + small + groups * oc * (1 + words)  # + zero points as bytes + the words
    assert held["sm90_blob"] == (qweight_bytes + small, expected), held
    assert held["checkpoint"][1] > 2.9 * qweight_bytes, held
    gc.collect()
    assert not any(k[0] == "blob" for k in awq_sm90._cache)


@pytest.mark.parametrize("M", [3, 40])
def test_layer_blob_layout_gradient_and_compile(M):
    """d x and d bias equal the checkpoint layout's (the same dequantized weight); torch.compile (inductor,
    fullgraph) gives the eager result."""
    torch.manual_seed(M)
    ckpt = AwqLinear.from_linear(torch.nn.Linear(512, 256, device="cuda"), 128, torch.float16)
    blob = AwqLinear.from_linear(torch.nn.Linear(512, 256, device="cuda"), 128, torch.float16)
    blob.load_state_dict(ckpt.state_dict())
    blob.set_weight_layout_("sm90_blob")
    grads = {}
    for name, layer in (("checkpoint", ckpt), ("sm90_blob", blob)):
        layer.bias.requires_grad_(True)
        x = torch.randn(2, M, 512, dtype=torch.float16, device="cuda", generator=torch.Generator("cuda").manual_seed(1),
                        requires_grad=True)
        layer(x).float().square().sum().backward()
        grads[name] = (x.grad, layer.bias.grad)
        layer.bias.requires_grad_(False)
        layer.bias.grad = None
    for a, b in zip(grads["checkpoint"], grads["sm90_blob"]):
        assert torch.allclose(a.float(), b.float(), rtol=2e-2, atol=1e-2 * a.float().abs().max().item())
    x = torch.randn(M, 512, dtype=torch.float16, device="cuda")
    with torch.no_grad():
        assert torch.equal(torch.compile(blob, fullgraph=True)(x), blob(x))


def test_replace_autoawq_linears_one_module_at_a_time():
    """16 AutoAWQ-style 8192^2 modules swapped into the blob layout: each qweight is freed before the next blob is
    built, so the peak above the end state stays far below the model's qweight bytes (converting all at once would
    add all of them), the end state holds the blobs instead of the qweights, and the layers compute what the
    checkpoint did."""
    class WQLinear_GEMM(torch.nn.Module):  # noqa: N801 - AutoAWQ's class name and attributes, without AutoAWQ
        def __init__(self, seed):
            super().__init__()
            self.w_bit, self.group_size, self.in_features, self.out_features = 4, 128, 8192, 8192
            g = torch.Generator("cuda").manual_seed(seed)
            self.register_buffer("qweight", torch.randint(-2**31, 2**31 - 1, (8192, 1024), dtype=torch.int32,
                                                          device="cuda", generator=g))
            self.register_buffer("qzeros", torch.randint(-2**31, 2**31 - 1, (64, 1024), dtype=torch.int32,
                                                         device="cuda", generator=g))
            self.register_buffer("scales", (torch.rand(64, 8192, device="cuda", generator=g) * 0.01 + 0.001).half())
            self.register_buffer("bias", None)

    from cute_kernels.nn import replace_autoawq_linears_

    clear_weight_caches()
    model = torch.nn.Sequential(*[WQLinear_GEMM(i) for i in range(16)])
    x = torch.randn(3, 8192, dtype=torch.float16, device="cuda")
    first = model[0]
    ref = awq_gemm_ref(x.cpu(), first.qweight.cpu(), first.scales.cpu(), first.qzeros.cpu())
    del first
    qweight_bytes = 16 * 8192 * 8192 // 2
    gc.collect()
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    assert replace_autoawq_linears_(model, "sm90_blob") == 16
    torch.cuda.synchronize()
    end, peak = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
    assert end == start  # the blob has qweight's bytes here (whole 64 x 64 blocks)
    assert peak - end < 0.5 * qweight_bytes, (peak - end) / qweight_bytes
    assert _err(model[0](x), ref) < TOL[torch.float16]


@pytest.mark.parametrize("m", [4, 40])  # decode tiles on the blob, the WGMMA path
def test_blob_layout_under_reduce_overhead(m):
    """torch.compile(mode="reduce-overhead") of a blob-layout layer: the zero points and parameter words first built
    inside inductor's CUDA-graph warm-up come from the regular pool; replays read the new inputs."""
    torch._dynamo.reset()
    torch.manual_seed(11)
    layer = AwqLinear.from_linear(torch.nn.Linear(4096, 4096, device="cuda"), 128, torch.float16)
    layer.set_weight_layout_("sm90_blob")
    clear_weight_caches()
    f = torch.compile(layer, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
            assert torch.equal(f(x).clone(), layer(x))


def test_blob_linear_opcheck():
    qweight, scales, qzeros = _checkpoint(256, 64, 64, torch.float16, seed=2)
    x = torch.randn(3, 3, 256, device="cuda", dtype=torch.float16)
    torch.library.opcheck(torch.ops.cute_kernels.awq_blob_linear.default, (x, awq_blob(qweight), scales, qzeros, None))
