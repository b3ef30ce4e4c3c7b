"""GPU tier: quantized_mm on the device vs the float64 reference (every width x dtype, both paths, tails).

Fresh random inputs per case; outputs poisoned with NaN before the call, so an element the kernel skips fails.
Tolerance, relative to max|ref|: the output dtype's rounding plus fp32 accumulation (bf16 8e-3, fp16 1.5e-3,
fp32 2e-5); fp32 x with group scales carries the bf16 rounding of the scale folded into the weight (8e-3), except
where the scales are promoted onto the fp32 partial sums (groups of whole K steps: kernel.promotes_scales).
"""

import pytest
import torch

from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.reference import quantized_mm_ref
from cute_kernels.weight_only import config, quantized_mm
from cute_kernels.weight_only.formats import signed_format
from cute_kernels.weight_only.kernel import promotes_scales

from .conftest import poisoned

pytestmark = pytest.mark.gpu

TOL = {torch.bfloat16: 8e-3, torch.float16: 1.5e-3, torch.float32: 2e-5}


def _check(x, w_packed, scale, bits, gs=None, out_dtype=None, **kw):
    M, N = x.shape[0], w_packed.shape[0]
    od = out_dtype or x.dtype
    out = poisoned((M, N), od)
    res = quantized_mm(x, w_packed, scale, bits, gs, out_dtype, out=out, **kw)
    assert res is out
    torch.cuda.synchronize()
    ref = quantized_mm_ref(x.cpu(), w_packed.cpu(), scale, bits, None if gs is None else gs.float().cpu())
    assert not out.isnan().any(), "unwritten (NaN) outputs"
    err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
    folded = gs is not None and not promotes_scales(signed_format(bits), True, x.shape[1] // gs.shape[1])
    tol = TOL[od] if not (x.dtype == torch.float32 and folded) else 8e-3
    if od == torch.float32 and x.dtype != torch.float32:
        tol = TOL[x.dtype]
    assert err < tol, f"max error {err:.3e} relative to max|ref| (tol {tol:.1e})"


def _case(bits, M, N, K, dtype, group=None, seed=0):
    torch.manual_seed(seed + 1000 * bits + M)
    x = torch.randn(M, K, dtype=dtype, device="cuda")
    w_packed, scale, gs = quantize_weights(torch.randn(N, K, device="cuda"), bits, group)
    return x, w_packed, scale, gs


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_decode_path_every_width_and_dtype(bits, dtype):
    x, w, s, _ = _case(bits, 3, 200, 1024 + 128, dtype)  # N tail (200 = 12.5 tiles), K not a multiple of the step
    _check(x, w, s, bits)


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
def test_decode_path_group_scales_m16(bits):
    x, w, s, gs = _case(bits, 16, 136, 768, torch.bfloat16, group=32 if bits >= 4 else 128)
    _check(x, w, s, bits, gs, path="decode")  # forced: on SM90 1/2/4-bit with group scales go to the WGMMA path


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
def test_decode_path_other_weight_pipeline(bits):
    """The decode tiles' weight pipeline and x prefetch that the dispatch does not pick for this width."""
    x, w, s, _ = _case(bits, 5, 200, 1024 + 128, torch.bfloat16, seed=5)
    plan = config.decode_plan(bits, 5)
    _check(x, w, s, bits, tile=config.decode_tile(bits, 5, 200, 132, ring=not plan.ring, x_ahead=not plan.x_ahead))


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
@pytest.mark.parametrize("m", [12, 16])
def test_decode_path_token_major(bits, m):
    """9-16 tokens as one token tile per CTA with token tiles fastest in the grid (the 1/2-bit plans; forced here for
    every width), checked on all tokens."""
    x, w, s, _ = _case(bits, m, 200, 1024 + 128, torch.bfloat16, seed=m)
    _check(x, w, s, bits, tile=config.decode_tile(bits, m, 200, 132, token_major=True))


@pytest.mark.parametrize("bits,m,warps_n", [(8, 3, 2), (4, 16, 2), (4, 1, 4), (8, 12, 4)])
def test_decode_path_side_by_side_warps(bits, m, warps_n):
    """2 or 4 warps side by side along N (the dispatch's choice on multi-wave grids), forced on a small shape with
    N, K and M tails."""
    import dataclasses

    x, w, s, _ = _case(bits, m, 200, 1024 + 128, torch.bfloat16, seed=warps_n)
    tile = dataclasses.replace(config.decode_tile(bits, m, 200, 132), warps_n=warps_n, warps_k=8 // warps_n)
    _check(x, w, s, bits, tile=tile)


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
@pytest.mark.parametrize("m", [13, 16])
def test_decode_path_9_to_16_tokens_wide_layer(bits, m):
    """The shipped 9-16-token plans of a layer wide enough for their full tiles (N = 8200: a tail CTA), the decode
    path forced (on SM90 the default dispatch sends unscaled 1/2/4-bit weights to the WGMMA path from
    config.WGMMA_MIN_M tokens)."""
    x, w, s, _ = _case(bits, m, 8200, 640, torch.bfloat16, seed=m + 3)
    _check(x, w, s, bits, path="decode")


@pytest.mark.parametrize("m", [12, 16])
def test_decode_path_scaled_short_k_split(m):
    """Session 12's split of the scaled 4-bit 16-token plan (2 tiles per warp, 2 warps side by side) on the layer
    that selects it (N = 14336, K = 4096), group-128 scales; the decode path forced (on SM90 the default dispatch
    sends these token counts to the WGMMA path since session 16: config.WGMMA_MIN_M_GROUPED)."""
    assert config.decode_tile(4, m, 14336, 132, scaled=True, k=4096).warps_n == 2
    x, w, s, gs = _case(4, m, 14336, 4096, torch.bfloat16, group=128, seed=m)
    _check(x, w, s, 4, gs, path="decode")


@pytest.mark.parametrize("bits", [4, 2, 1])
@pytest.mark.parametrize("m", [1, 8, 16])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_path_fields_in_place(bits, m, dtype):
    """Decode tiles with the fields left in place (config.FIELDS_IN_PLACE_NOTE), forced for every low width with 1
    and 2 tiles per warp, N / K tails."""
    import dataclasses

    x, w, s, _ = _case(bits, m, 200, 1024 + 128, dtype, seed=m + 7)
    for nt in (1, 2):
        _check(x, w, s, bits, tile=dataclasses.replace(config.decode_tile(bits, m, 200, 132), nt=nt,
                                                        fields_in_place=True))


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
def test_tensor_core_path(bits):
    x, w, s, _ = _case(bits, 77, 300, 1536, torch.bfloat16)  # M, N tails on 32 x 128 CTA tiles (split-K tile)
    _check(x, w, s, bits, path="tensor_core")  # forced: on SM90 the WGMMA path takes bf16 x at this M


def test_tensor_core_path_without_split_k():
    x, w, s, _ = _case(4, 300, 136, 1024, torch.bfloat16)  # M > TENSOR_CORE_SPLIT_K_MAX_M
    _check(x, w, s, 4, path="tensor_core")  # forced: the dispatcher sends this M to the dense path


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_tensor_core_path_dtypes_and_groups(dtype):
    x, w, s, gs = _case(4, 40, 256, 512, dtype, group=64)
    _check(x, w, s, 4, gs)


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
@pytest.mark.parametrize("M", [3, 16, 40])  # decode tiles (one and two token tiles), split-K tensor-core tiles
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_promoted_group_scales(bits, M, dtype):
    """Groups of exactly one K step (512 / bits values): the scales go onto the fp32 partial sums (decode tiles, and
    fp32 x on the tensor-core tiles; bf16 x there keeps the fold, quantized_mm.use_promoted_scales); fp32 x is then
    held to the plain fp32 tolerance. N = 72 is a row tail of every decode and tensor-core tile."""
    group = 512 // bits
    x, w, s, gs = _case(bits, M, 72, 3 * group, dtype, group=group, seed=bits + M)
    assert promotes_scales(signed_format(bits), True, group)
    _check(x, w, s, bits, gs, path="decode" if M <= 16 else None)  # decode tiles also where SM90 runs WGMMA


def test_fp32_scale_dtypes_and_out_dtype():
    x, w, s, gs = _case(4, 5, 96, 512, torch.bfloat16, group=128)
    _check(x, w, s, 4, gs.to(torch.bfloat16), out_dtype=torch.float32)


def test_k_padding_path():
    x, w, s, _ = _case(4, 2, 64, 100, torch.float16)  # 50-byte rows: not whole 16-byte vectors
    _check(x, w, s, 4)


def test_large_n_default_dispatch_and_repeat_calls():
    x, w, s, _ = _case(4, 1, 4096, 4096, torch.bfloat16)
    _check(x, w, s, 4)
    _check(x, w, s, 4)  # second call: the cached plan (no Python checks) must compute the same thing
    x2 = torch.randn_like(x)
    _check(x2, w, s, 4)


def test_warm_path_with_out():
    """A repeat call that passes ``out=`` takes the warm path (session 13: it used to run every Python check again,
    ~45 µs of host time on an H200) and still computes the right thing into the given tensor; an ``out`` that breaks
    a rule still gets the full checks' named error."""
    x, w, s, _ = _case(4, 3, 4096, 4096, torch.bfloat16)
    for _ in range(3):  # first call plans; the others reuse the plan with a fresh poisoned out each time
        _check(x, w, s, 4)
    bad_dtype = torch.empty(3, 4096, dtype=torch.float16, device="cuda")
    with pytest.raises(TypeError, match="out"):
        quantized_mm(x, w, s, 4, out=bad_dtype)
    with pytest.raises(ValueError, match="out"):
        quantized_mm(x, w, s, 4, out=torch.empty(4, 4096, dtype=torch.bfloat16, device="cuda"))
    strided = torch.empty(3, 8192, dtype=torch.bfloat16, device="cuda")[:, ::2]
    with pytest.raises(ValueError, match="out must be contiguous"):
        quantized_mm(x, w, s, 4, out=strided)


@pytest.mark.parametrize("M", [1, 5, 12, 40])
def test_sm80_class_variant_on_this_gpu(monkeypatch, M):
    """The weight-only kernel as an SM80-class GPU runs it (config.tile_for_arch for sm_86: no programmatic dependent
    launch, no L2 bulk prefetch, no CTA cap, the 9-16-token rings cut to 99 KB) with A100's 108 SMs for the tile
    choice, compiled for this GPU: quantized_mm (int4 g128, int2) and awq_gemm against float64. The SM80 binaries
    themselves cannot run here (the CPU tier compiles them)."""
    import importlib

    from cute_kernels import arch as _arch
    from cute_kernels.formats.awq import awq_quantize
    from cute_kernels.reference import awq_gemm_ref
    from cute_kernels.weight_only import awq_gemm

    qmm_mod = importlib.import_module("cute_kernels.weight_only.quantized_mm")  # the package exports the function
    awq = importlib.import_module("cute_kernels.weight_only.awq")

    built = []
    compile_fn = qmm_mod.compile_weight_only

    def as_on_sm86(fmt_key, x_dtype, out_dtype, scale_dtype, tile, arch, promote, has_bias=False):
        built.append(config.tile_for_arch(tile, "sm_86"))
        return compile_fn(fmt_key, x_dtype, out_dtype, scale_dtype, built[-1], arch, promote, has_bias=has_bias,
                          pdl=False)

    monkeypatch.setattr(qmm_mod, "compile_weight_only", as_on_sm86)
    monkeypatch.setattr(_arch, "sm_count", lambda index=None: 108)
    monkeypatch.setattr(awq, "_wgmma_eligible", lambda *a: False)
    path = "decode" if M <= 16 else "tensor_core"
    for bits, group in ((4, 128), (2, None)):
        x, w_packed, scale, gs = _case(bits, M, 4104, 4096, torch.float16, group, seed=7)
        _check(x, w_packed, scale, bits, gs, path=path)
    torch.manual_seed(M)
    qweight, qzeros, scales = awq_quantize(torch.randn(2048, 11008, device="cuda") * 0.05, 128,
                                           scale_dtype=torch.bfloat16)
    x = torch.randn(M, 2048, dtype=torch.bfloat16, device="cuda")
    out = poisoned((M, 11008), torch.bfloat16)
    awq_gemm(x, qweight, scales, qzeros, out=out, path=path)
    ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    assert not out.isnan().any()
    assert ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item() < TOL[torch.bfloat16]
    assert built and all(not t.l2_prefetch_mb and not t.preload_weights and not t.max_ctas_per_sm for t in built)
