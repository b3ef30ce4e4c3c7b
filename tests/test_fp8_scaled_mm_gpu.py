"""GPU tier of fp8_scaled_mm: FP8 per-token / per-channel scaled GEMM against the float64 reference (the FP8 values
are exact in float64), fresh random inputs, NaN-poisoned outputs."""

import pytest
import torch

from cute_kernels import fp8_scaled_mm
from cute_kernels.configs import shipped_sm90_int8_configs
from cute_kernels.reference import int8_scaled_mm_ref

pytestmark = pytest.mark.gpu
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _inputs(m, n, k, batch=None, a_kind="vector", b_kind="vector", bias=True, out_dtype=torch.bfloat16,
            dtypes=(E4M3, E4M3), seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    lead = () if batch is None else (batch,)
    a = (torch.randn((*lead, m, k), device="cuda", generator=g) * 2).to(dtypes[0])
    w = (torch.randn((*lead, n, k), device="cuda", generator=g) * 2).to(dtypes[1])
    a_scale = torch.rand(m if a_kind == "vector" else 1, device="cuda", generator=g) * 0.02 + 0.001
    b_scale = torch.rand(n if b_kind == "vector" else 1, device="cuda", generator=g) * 0.02 + 0.001
    bias_t = (torch.randn(n, device="cuda", generator=g)).to(out_dtype) if bias else None
    return a, w.transpose(-1, -2), a_scale, b_scale, bias_t


def _check(out, a, b, a_scale, b_scale, bias, out_dtype, c=None):
    ref = int8_scaled_mm_ref(a, b, a_scale, b_scale, bias)
    if c is not None:
        ref = ref + c.double()
    assert out.dtype == out_dtype and out.shape == ref.shape
    assert not torch.isnan(out).any(), "kernel left elements unwritten (NaN poison survived)"
    # FP8 WGMMA accumulates the whole K without promotion (fewer than fp32's mantissa bits, an error that grows with
    # the number of k-steps: DeepSeek-V3 reports up to ~2% at K = 4096), then one rounding: a norm bound plus an
    # element bound, both scaled with K, so that one wrong row, column or tile (errors of order 1) cannot hide.
    grow = max(1.0, a.shape[-1] / 4096)
    err = out.double() - ref
    rel = (err.norm() / ref.norm()).item()
    assert rel <= 2e-2 * grow, f"relative error {rel:.3g}"
    rms = ref.pow(2).mean().sqrt()
    bad = err.abs() > 3e-2 * ref.abs() + 3e-2 * grow * rms
    assert not bad.any(), f"{int(bad.sum())} elements off, first at {bad.nonzero()[0].tolist()}"


SHAPES = [(1, 4096, 4096), (17, 256, 512), (16, 8, 16), (4097, 264, 272), (128, 4096, 1024), (32, 14336, 256),
          (64, 1024, 4096), (300, 1000, 2000), (1024, 2048, 1024), (1, 4096, 14336)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_shapes(m, n, k, out_dtype):
    a, b, a_s, b_s, bias = _inputs(m, n, k, out_dtype=out_dtype, seed=m * 7 + n + k)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    fp8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=out_dtype, out=out)
    _check(out, a, b, a_s, b_s, bias, out_dtype)
    assert torch.equal(fp8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=out_dtype), out)  # the warm path


@pytest.mark.parametrize("dtypes", [(E5M2, E4M3), (E4M3, E5M2), (E5M2, E5M2)], ids=["e5m2xe4m3", "e4m3xe5m2", "e5m2"])
@pytest.mark.parametrize("m", [5, 700])
def test_e5m2_pairs(dtypes, m):
    a, b, a_s, b_s, bias = _inputs(m, 520, 384, dtypes=dtypes, seed=m)
    _check(fp8_scaled_mm(a, b, a_s, b_s, bias), a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("a_kind", ["vector", "scalar"])
@pytest.mark.parametrize("b_kind", ["vector", "scalar"])
@pytest.mark.parametrize("bias", [True, False])
def test_epilogue_variants(a_kind, b_kind, bias):
    for m in (5, 700):  # one swapped (decode) and one plain config
        a, b, a_s, b_s, bias_t = _inputs(m, 520, 384, a_kind=a_kind, b_kind=b_kind, bias=bias, seed=m)
        _check(fp8_scaled_mm(a, b, a_s, b_s, bias_t), a, b, a_s, b_s, bias_t, torch.bfloat16)


@pytest.mark.parametrize("cfg", list(shipped_sm90_int8_configs()), ids=lambda c: c.describe())
def test_every_shipped_config(cfg):
    a, b, a_s, b_s, bias = _inputs(333, 776, 1040, seed=3)
    out = torch.full((333, 776), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg)
    _check(out, a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("m", [3, 513])
def test_batched_and_added_operand(m):
    a, b, a_s, b_s, bias = _inputs(m, 256, 512, batch=3, seed=m)
    _check(fp8_scaled_mm(a, b, a_s, b_s, bias), a, b, a_s, b_s, bias, torch.bfloat16)
    c = torch.randn(3, m, 256, device="cuda")
    _check(fp8_scaled_mm(a, b, a_s, b_s, bias, c=c), a, b, a_s, b_s, bias, torch.bfloat16, c=c)


def test_split_k_and_torch_op():
    """A decode-size problem that splits K (fp32 partials in the workspace) and its unsplit config both match float64
    (they differ by more than fp32 re-association: each K slice accumulates in the WGMMA's reduced precision, the
    partials in fp32); the torch op compiled with fullgraph equals the plain call; the bias gradient."""
    from cute_kernels.configs import replace, select_sm90_int8

    a, b, a_s, b_s, bias = _inputs(16, 4096, 4096, seed=11)
    cfg = select_sm90_int8(16, 4096, 4096)
    assert cfg.splits
    split = fp8_scaled_mm(a, b, a_s, b_s, bias.float(), out_dtype=torch.float32)
    whole = fp8_scaled_mm(a, b, a_s, b_s, bias.float(), out_dtype=torch.float32,
                          config=replace(cfg, split_k=1, split_tail=1))
    for out in (split, whole):
        _check(out, a, b, a_s, b_s, bias.float(), torch.float32)
    torch._dynamo.reset()
    f = torch.compile(lambda *t: torch.ops.cute_kernels.fp8_scaled_mm(*t), fullgraph=True)
    assert torch.equal(f(a, b, a_s, b_s, bias, torch.bfloat16), fp8_scaled_mm(a, b, a_s, b_s, bias))
    p = bias.clone().requires_grad_()
    fp8_scaled_mm(a, b, a_s, b_s, p).float().sum().backward()
    assert torch.equal(p.grad, torch.full_like(p, 16))


def test_errors_on_gpu():
    a, b, a_s, b_s, bias = _inputs(8, 256, 256)
    with pytest.raises(TypeError, match="bias must have dtype bfloat16; got int32"):
        fp8_scaled_mm(a, b, a_s, b_s, bias.int())
    with pytest.raises(ValueError, match="b must be column-major"):
        fp8_scaled_mm(a, b.contiguous(), a_s, b_s, bias)


# ------------------------------------------------------------------------------ promoted sums (use_fast_accum=False)
PROMOTED_SHAPES = [(1, 4096, 4096), (16, 264, 1024), (77, 1000, 2048), (300, 4096, 512), (1024, 2048, 1024),
                   (4097, 264, 256), (64, 14336, 4096)]


@pytest.mark.parametrize("m,n,k", PROMOTED_SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_promoted_shapes(m, n, k, out_dtype):
    a, b, a_s, b_s, bias = _inputs(m, n, k, out_dtype=out_dtype, seed=m * 5 + n + k)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    fp8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=out_dtype, out=out, use_fast_accum=False)
    _check(out, a, b, a_s, b_s, bias, out_dtype)
    again = fp8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=out_dtype, use_fast_accum=False)  # the warm path
    assert torch.equal(again, out)


def test_promoted_sums_are_more_precise_on_long_k():
    """Each 128-deep partial sum goes into an fp32 accumulator: on a long K the error against float64 is the fp16
    output's rounding (~3e-4), below the fast path's, whose FP8 WGMMA accumulator keeps fewer bits over all of K
    (session 37: 1.8-3.3e-3 with bf16 out)."""
    a, b, a_s, b_s, _ = _inputs(64, 512, 16384, bias=False, seed=3)
    ref = int8_scaled_mm_ref(a, b, a_s, b_s)
    errs = {}
    for fast in (True, False):
        out = fp8_scaled_mm(a, b, a_s, b_s, out_dtype=torch.float16, use_fast_accum=fast)
        errs[fast] = ((out.double() - ref).norm() / ref.norm()).item()
    rounding = ((ref.half().double() - ref).norm() / ref.norm()).item()
    assert errs[False] <= 1.5 * rounding, (errs, rounding)
    assert errs[False] < 0.5 * errs[True], (errs, rounding)


@pytest.mark.parametrize("a_kind,b_kind", [("scalar", "vector"), ("vector", "scalar"), ("scalar", "scalar")])
def test_promoted_per_tensor_scales_batched_and_e5m2(a_kind, b_kind):
    a, b, a_s, b_s, bias = _inputs(40, 520, 768, batch=3, a_kind=a_kind, b_kind=b_kind, dtypes=(E5M2, E4M3), seed=9)
    out = fp8_scaled_mm(a, b, a_s, b_s, bias, use_fast_accum=False)
    _check(out, a, b, a_s, b_s, bias, torch.bfloat16)


def test_promoted_torch_op_and_errors():
    a, b, a_s, b_s, bias = _inputs(33, 256, 512, seed=4)
    ops = torch.ops.cute_kernels
    want = fp8_scaled_mm(a, b, a_s, b_s, bias, use_fast_accum=False)
    assert torch.equal(ops.fp8_scaled_mm(a, b, a_s, b_s, bias, torch.bfloat16, False), want)
    f = torch.compile(lambda *t: ops.fp8_scaled_mm(*t, torch.bfloat16, False), fullgraph=True, backend="aot_eager")
    assert torch.equal(f(a, b, a_s, b_s, bias), want)
    a2, b2, a2_s, b2_s, _ = _inputs(8, 64, 144, bias=False)
    with pytest.raises(ValueError, match="K = 144 must be a multiple of 128 with use_fast_accum=False"):
        fp8_scaled_mm(a2, b2, a2_s, b2_s, use_fast_accum=False)
    with pytest.raises(TypeError, match="out_dtype must be torch.float16 or torch.bfloat16 with use_fast_accum"):
        fp8_scaled_mm(a, b, a_s, b_s, out_dtype=torch.float32, use_fast_accum=False)
    with pytest.raises(ValueError, match="^b_scale must have shape"):
        fp8_scaled_mm(a, b, a_s, b_s[:7], use_fast_accum=False)
