"""GPU tier: awq_gemm / awq_linear / awq_dequantize on the device vs the float64 / float32 references.

Tolerance relative to max|ref| (awq_gemm_ref uses the exact (q - z) * s; the kernel rounds it to x's dtype once, as
vLLM's does): fp16 2e-3, bf16 1e-2. awq_dequantize must be bit-exact (one rounding of an exact product).
"""

import pytest
import torch

from cute_kernels.formats.awq import awq_dequantize_reference, awq_quantize
from cute_kernels.reference import awq_gemm_ref
from cute_kernels.weight_only import awq_dequantize, awq_gemm, awq_linear

from .conftest import poisoned

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _awq(IC, OC, G, dtype, seed):
    torch.manual_seed(seed)
    qweight, qzeros, scales = awq_quantize(torch.randn(IC, OC, device="cuda"), G, scale_dtype=dtype)
    return qweight, scales, qzeros


def _err(out, ref):
    return ((out.double().cpu() - ref.cpu()).abs().max() / ref.abs().max()).item()


def _column_slices(OC, IC):
    """Every output channel of a small layer; the first and last 512 (first CTAs, tail) of a large one."""
    return [slice(0, OC)] if OC * IC <= 12 * 2**20 else [slice(0, 512), slice(OC - 512, OC)]


def _check_columns(out, x, qweight, scales, qzeros, slices):
    """out's columns in ``slices`` (multiples of 8) against the float64 reference of those output channels."""
    for cols in slices:
        packed = slice(cols.start // 8, cols.stop // 8)
        ref = awq_gemm_ref(x.cpu(), qweight[:, packed].contiguous().cpu(), scales[:, cols].contiguous().cpu(),
                           qzeros[:, packed].contiguous().cpu())
        assert _err(out[:, cols], ref) < TOL[x.dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M", [1, 7, 16, 33, 130])
@pytest.mark.parametrize("G", [32, 64, 128, -1])
def test_awq_gemm(dtype, M, G):
    IC, OC = 512, 200  # OC not a multiple of 64 (masked tiles)
    qweight, scales, qzeros = _awq(IC, OC, G, dtype, seed=M * 7 + G)
    x = torch.randn(M, IC, dtype=dtype, device="cuda")
    out = poisoned((M, OC), dtype)
    awq_gemm(x, qweight, scales, qzeros, out=out)
    assert not out.isnan().any()
    assert _err(out, awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())) < TOL[dtype]


@pytest.mark.parametrize("M,OC,IC", [(1, 14336, 4096), (4, 8192, 8192), (16, 28672, 4096), (12, 8192, 8192),
                                     (1, 4096, 14336), (4, 1536, 8960)])
def test_awq_gemm_default_dispatch_large_layers(M, OC, IC):
    """The shipped decode tiles on real layer sizes (4 or 2 warps side by side, 64-row warps at 9-16 tokens, the L2
    prefetch on one-wave grids of layers deeper than wide since session 32; the decode path forced: on SM90 AWQ takes
    the WGMMA path from 12 tokens since session 16)."""
    from cute_kernels.weight_only import config

    if OC < IC:
        assert config.decode_tile("awq", M, OC, 132, scaled=True, k=IC).l2_prefetch_mb > 0
    qweight, scales, qzeros = _awq(IC, OC, 128, torch.float16, seed=M + OC)
    x = torch.randn(M, IC, dtype=torch.float16, device="cuda")
    out = poisoned((M, OC), torch.float16)
    awq_gemm(x, qweight, scales, qzeros, out=out, path="decode")
    assert not out.isnan().any()
    cols = slice(OC - 512, OC)  # the reference on the last 512 output channels (a tail CTA included)
    ref = awq_gemm_ref(x.cpu(), qweight[:, cols.start // 8:].contiguous().cpu(), scales[:, cols].contiguous().cpu(),
                       qzeros[:, cols.start // 8:].contiguous().cpu())
    assert _err(out[:, cols], ref) < TOL[torch.float16]


def _launched(ran):
    """A context in which awq_gemm's repack launches append (format key, tile) to ``ran``."""
    import contextlib

    from cute_kernels.weight_only import awq as awq_mod

    @contextlib.contextmanager
    def hooked():
        launch = awq_mod.launch
        awq_mod.launch = lambda fmt_key, *a: (ran.append((fmt_key, a[-3])), launch(fmt_key, *a))[1]
        try:
            yield
        finally:
            awq_mod.launch = launch
    return hooked()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,OC,IC", [(1, 14328, 2176), (5, 15360, 3072), (7, 14336, 2048)])
def test_awq_side_by_side_ring_tile(dtype, M, OC, IC):
    """config.AWQ_SIDE_BY_SIDE_RING (session 43): the dispatch's decode tile with 4 warps side by side runs from the
    cp.async ring, first steps preloaded - in bf16; fp16 runs it as the register pipeline with the parameter words
    (session 55, config.AWQ_PARAM_WORDS_WIDE_TILES), since session 56 one CTA per SM (config.AWQ_SIDE_BY_SIDE_ONE_CTA:
    7-8 warps side by side); an OC tail (14328: the last CTA's rows partly past OC) and an odd count of K steps per
    warp (IC = 2176: 17 steps over 2 warps) included. Checked on the last 512 output channels, all tokens, against
    float64."""
    from cute_kernels.weight_only import config

    path, tile = config.select_tile(4, M, OC, torch.cuda.get_device_properties(0).multi_processor_count, scaled=True,
                                    awq=True, k=IC, wgmma=False)
    assert path == "decode" and tile.warps_n == 4 and tile.stages == config.AWQ_SIDE_BY_SIDE_RING["stages"]
    qweight, scales, qzeros = _awq(IC, OC, 128, dtype, seed=M + OC + IC)
    x = torch.randn(M, IC, dtype=dtype, device="cuda")
    out = poisoned((M, OC), dtype)
    ran = []
    with _launched(ran):
        awq_gemm(x, qweight, scales, qzeros, out=out, path="decode")
    words = dtype == torch.float16 and "side_ring" in config.AWQ_PARAM_WORDS_WIDE_TILES
    assert [(f, t.stages, t.param_words) for f, t in ran] == [("awq_zmma", 0, True) if words else ("awq", 3, False)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    one_cta = config.side_by_side_one_cta_warps(OC, sms) if words else None  # session 56: one CTA per SM
    assert (ran[0][1].warps_n, ran[0][1].min_ctas_hint) == ((one_cta, 1) if one_cta else (4, 2 if words else 0)), ran
    assert not out.isnan().any()
    cols = slice(OC - 512, OC)
    ref = awq_gemm_ref(x.cpu(), qweight[:, cols.start // 8:].contiguous().cpu(), scales[:, cols].contiguous().cpu(),
                       qzeros[:, cols.start // 8:].contiguous().cpu())
    assert _err(out[:, cols], ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,OC,IC,row_tiles", [(1, 4616, 2048, 3), (5, 9736, 1024, 5), (8, 11008, 1152, 6),
                                               (3, 13832, 5120, 7), (2, 16888, 4352, 8)])
def test_awq_one_cta_per_sm_tile(dtype, M, OC, IC, row_tiles):
    """config.one_cta_per_sm_warps (session 51): a multi-wave AWQ decode grid becomes one CTA per SM with
    ``row_tiles`` 16-row tiles side by side and 3-8 warps along K (the warps' K steps uneven: IC = 1152 is 9 steps
    over 4 warps, 5120 40 over 3, 4352 34 over 3); OC tails (4616, 9736, 13832, 16888: a last CTA with fewer rows, a
    last 16-row tile of 8). At 132 SMs; on another GPU the warps are the ones its SM count gives. Checked on every
    output channel of the smaller layers and on two 512-channel slices (first CTAs, tail) of the larger, all tokens,
    against float64."""
    from cute_kernels.weight_only import config

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    path, tile = config.select_tile(4, M, OC, sms, "decode", scaled=True, awq=True, k=IC)
    expected = config.one_cta_per_sm_warps("awq", OC, IC, sms)
    if sms == 132:
        assert expected is not None and expected[0] == row_tiles
    if expected is not None:
        assert (tile.warps_n, tile.warps_k) == expected and tile.threads > config.DECODE_THREADS
    qweight, scales, qzeros = _awq(IC, OC, 128, dtype, seed=M + OC + IC)
    x = torch.randn(M, IC, dtype=dtype, device="cuda")
    out = poisoned((M, OC), dtype)
    ran = []
    with _launched(ran):
        awq_gemm(x, qweight, scales, qzeros, out=out, path="decode")
    # (session 55: fp16 with the parameter words, but on AWQ_PARAM_WORDS_ONE_CTA_SKIP_WARPS_N's widths)
    assert [t.param_words for _, t in ran] == [dtype == torch.float16 and config.awq_param_words_tile(tile)]
    assert not out.isnan().any()
    _check_columns(out, x, qweight, scales, qzeros, _column_slices(OC, IC))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,OC,IC,G", [(1, 4096, 4096, 128), (4, 14328, 2176, 128), (16, 8200, 1024, 128),
                                       (3, 11008, 1152, 128), (7, 1032, 2048, 2048), (12, 264, 4096, 128)])
def test_awq_zero_mma_format(dtype, M, OC, IC, G, monkeypatch):
    """awq_zmma (session 52: the zero point and the magic number taken out by a second MMA) on the dispatch's decode
    tiles - one warp across with the L2 prefetch (4096^2), the side-by-side ring with an OC tail and an odd count of K
    steps per warp (14328 x 2176), two token tiles (16, 12), one CTA per SM (11008 x 1152), a single group (G = IC) -
    against float64; x with a common offset of 4, so that the main MMA's running sum (~M_j sum x) is large before
    the correction cancels it."""
    from cute_kernels.weight_only import awq as awq_mod

    ran = []
    monkeypatch.setattr(awq_mod, "decode_format", lambda *a: ran.append(1) or "awq_zmma")
    qweight, scales, qzeros = _awq(IC, OC, G, dtype, seed=M + OC + IC)
    x = (torch.randn(M, IC, device="cuda") + 4.0).to(dtype)
    out = poisoned((M, OC), dtype)
    awq_gemm(x, qweight, scales, qzeros, out=out, path="decode")
    assert ran and not out.isnan().any()
    _check_columns(out, x, qweight, scales, qzeros, _column_slices(OC, IC))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,OC,IC", [(1, 2048, 8192), (3, 1544, 8960), (8, 4096, 9088), (5, 8192, 4096),
                                     (2, 7176, 8192)])
def test_awq_swapped_register_tiles(dtype, M, OC, IC, monkeypatch):
    """(Since session 54 fp16 runs awq_zmma with parameter words on all of them, and bf16's two-warp tiles take the
    words: TileShape.param_words, checked through the cold call and the warm plan.) Session 53's register plan
    (config.AWQ_DECODE_SWAP_MIN_STEPS: the two-CTA hint to ptxas with the K loop unrolled by two and the register
    buffers swapped) as the default dispatch runs it: one warp across (2048 x 8192, an OC tail at 1544, an odd count
    of K steps on some warps at IC = 9088) and two warps side by side (awq_zmma, 7176 rows: a tail), against float64
    on poisoned outputs; the launch must have used the swapped tile, in the format the dispatch picks (scales below
    0.25: awq_fma in fp16 one warp across, bf16's awq; awq_zmma side by side)."""
    from cute_kernels.formats.awq import awq_quantize
    from cute_kernels.weight_only import awq as awq_mod

    if torch.cuda.get_device_capability() != (9, 0) or torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the tiles are those of 132-SM SM90 GPUs")
    ran = []
    launch = awq_mod.launch
    monkeypatch.setattr(awq_mod, "launch",
                        lambda fmt_key, *a, **k: (ran.append((fmt_key, a[7])), launch(fmt_key, *a, **k))[1])
    torch.manual_seed(M + OC + IC)
    qweight, qzeros, scales = awq_quantize(0.1 * torch.randn(IC, OC, device="cuda"), 128, scale_dtype=dtype)
    x = torch.randn(M, IC, dtype=dtype, device="cuda")
    out = poisoned((M, OC), dtype)
    awq_gemm(x, qweight, scales, qzeros, out=out, path="decode")
    (fmt_key, tile), = ran
    want = "awq_zmma" if tile.warps_n == 2 or dtype == torch.float16 else "awq"  # (session 54: fp16's words)
    assert fmt_key == want and tile.min_ctas_hint == 2 and tile.swap_registers, ran
    assert tile.param_words == (want == "awq_zmma"), tile
    assert not out.isnan().any()
    _check_columns(out, x, qweight, scales, qzeros, _column_slices(OC, IC))
    if tile.param_words:  # the default dispatch twice: the cold call builds the plan, whose launch passes the words
        for _ in range(2):
            out2 = poisoned((M, OC), dtype)
            awq_gemm(x, qweight, scales, qzeros, out=out2)
            assert not out2.isnan().any()
            _check_columns(out2, x, qweight, scales, qzeros, _column_slices(OC, IC))


@pytest.mark.parametrize("dtype,M,OC,IC,decode", [(torch.float16, 7, 4096, 11008, True),
                                                  (torch.float16, 8, 4096, 11008, False),
                                                  (torch.bfloat16, 8, 8192, 4096, True),
                                                  (torch.bfloat16, 6, 8192, 8192, False)])
def test_awq_swapped_decode_dispatch(dtype, M, OC, IC, decode, monkeypatch):
    """The default dispatch (session 53, config.AWQ_SWAPPED_DECODE_MAX_M): 6-7 tokens in fp16 and 6-8 in bf16 on the
    swapped register tiles run the decode path (one launch of the repack reader), above that or on 8192^2 the WGMMA
    path (none); against float64 on poisoned outputs."""
    from cute_kernels.weight_only import awq as awq_mod

    if torch.cuda.get_device_capability() != (9, 0) or torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the entry is for 132-SM SM90 GPUs")
    ran = []
    launch = awq_mod.launch
    monkeypatch.setattr(awq_mod, "launch", lambda fmt_key, *a, **k: (ran.append(a[7]), launch(fmt_key, *a, **k))[1])
    qweight, scales, qzeros = _awq(IC, OC, 128, dtype, seed=M + OC + IC)
    x = torch.randn(M, IC, dtype=dtype, device="cuda")
    out = poisoned((M, OC), dtype)
    awq_gemm(x, qweight, scales, qzeros, out=out)
    assert len(ran) == int(decode) and all(t.swap_registers and t.min_ctas_hint for t in ran), ran
    assert not out.isnan().any()
    _check_columns(out, x, qweight, scales, qzeros, _column_slices(OC, IC))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,OC,expect", [(1, 8192, "awq_zmma"), (4, 7168, "awq_zmma"), (5, 8192, None)])
def test_awq_zero_mma_long_k_dispatch(M, OC, expect, dtype, monkeypatch):
    """The default dispatch (session 52): x at <= 4 tokens on 8192^2 / 7168 x 8192 runs the decode tile with
    awq_zmma instead of the WGMMA plan (config.AWQ_ZERO_MMA_LONG_K_MAX_M); at 5 tokens the WGMMA path (no decode
    launch). Against float64 on two 512-channel slices."""
    from cute_kernels.weight_only import awq as awq_mod

    if torch.cuda.get_device_capability() != (9, 0) or torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the entry is for 132-SM SM90 GPUs")
    ran = []
    launch = awq_mod.launch
    monkeypatch.setattr(awq_mod, "launch", lambda fmt_key, *a, **k: (ran.append(fmt_key), launch(fmt_key, *a, **k))[1])
    IC = 8192
    qweight, scales, qzeros = _awq(IC, OC, 128, dtype, seed=M + OC)
    x = torch.randn(M, IC, dtype=dtype, device="cuda")
    out = poisoned((M, OC), dtype)
    awq_gemm(x, qweight, scales, qzeros, out=out)
    assert ran == ([expect] if expect else []) and not out.isnan().any()
    _check_columns(out, x, qweight, scales, qzeros, [slice(0, 512), slice(OC - 512, OC)])


@pytest.mark.parametrize("path,M,OC,IC", [("decode", 1, 1032, 2048), ("decode", 4, 4096, 4096),
                                          ("decode", 8, 264, 4096), ("wgmma", 1, 520, 2176), ("wgmma", 16, 4104, 1024),
                                          ("wgmma", 40, 264, 4096), ("wgmma", 300, 520, 2176)])
@pytest.mark.parametrize("amp", [0.05, 1.0], ids=["e0", "e2"])
def test_awq_gemm_one_fma_format(path, M, OC, IC, amp):
    """fp16 x runs awq_fma (session 34) on the WGMMA path up to 512 tokens (e = 2 where max|s| ~ 0.5) and on the decode
    tiles that fold the scale when every |s| < 0.25 (since session 54 not those of config.awq_param_words_tile's
    shape: awq_zmma with parameter words) (on SM90 those read the blob since session 41), the exact awq elsewhere;
    all within the fp16 tolerance of the float64 reference. The format each call ran is read from the launch."""
    from cute_kernels.weight_only import awq as awq_mod
    from cute_kernels.weight_only import awq_sm90, wgmma

    if path == "wgmma" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the WGMMA path needs SM90")
    qweight, scales, qzeros = _awq(IC, OC, 128, torch.float16, seed=M + OC)
    scales = (scales * amp).contiguous()  # N(0, 1) weights give max|s| ~ 0.5
    x = torch.randn(M, IC, dtype=torch.float16, device="cuda")
    ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    ran = []
    plan_launch, launch, decode = wgmma.WgmmaPlan.launch, awq_mod.launch, awq_sm90.DecodePlan.__call__
    try:
        wgmma.WgmmaPlan.launch = lambda self, *a: (ran.append(self.fmt_key), plan_launch(self, *a))[1]
        awq_mod.launch = lambda fmt_key, *a: (ran.append(fmt_key), launch(fmt_key, *a))[1]
        awq_sm90.DecodePlan.__call__ = lambda self, *a: (ran.append(self.fmt_key), decode(self, *a))[1]
        out = poisoned((M, OC), torch.float16)
        awq_gemm(x, qweight, scales, qzeros, out=out, path=path)
    finally:
        wgmma.WgmmaPlan.launch, awq_mod.launch, awq_sm90.DecodePlan.__call__ = plan_launch, launch, decode
    one_fma = path == "wgmma" or (amp < 0.5 and config_folds(M, OC, IC))
    words = path == "decode" and config_param_words(M, OC, IC)  # (session 54: awq_zmma there, any scales)
    assert ran == ["awq_zmma" if words else "awq_fma" if one_fma else "awq"]
    assert not out.isnan().any()
    assert _err(out, ref) < TOL[torch.float16]


def config_param_words(m, oc, ic):
    """Whether this problem's decode tile runs awq_zmma with parameter words in fp16 (config.awq_param_words_tile)."""
    from cute_kernels.weight_only import config

    return config.awq_param_words_tile(config.decode_tile(
        "awq", m, oc, torch.cuda.get_device_properties(0).multi_processor_count, scaled=True, k=ic))


def config_folds(m, oc, ic):
    """Whether the decode tile of this problem folds the scale into the weight (not promoted): where awq_fma runs."""
    from cute_kernels.weight_only import config
    from cute_kernels.weight_only.quantized_mm import use_promoted_scales

    tile = config.decode_tile("awq", m, oc, torch.cuda.get_device_properties(0).multi_processor_count, scaled=True,
                              k=ic)
    return not use_promoted_scales("awq", True, 128, torch.float16, tile)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_awq_dequantize_bit_exact(dtype):
    qweight, scales, qzeros = _awq(384, 136, 128, dtype, seed=3)
    got = awq_dequantize(qweight, scales, qzeros)
    assert torch.equal(got.cpu(), awq_dequantize_reference(qweight.cpu(), scales.cpu(), qzeros.cpu()))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("lead", [(3,), (2, 5), (4, 80)])  # 3 and 10 tokens: fused; 320: dequantize + matmul
def test_awq_linear(dtype, lead):
    IC, OC = 256, 72
    qweight, scales, qzeros = _awq(IC, OC, 64, dtype, seed=len(lead) + lead[-1])
    x = torch.randn(*lead, IC, dtype=dtype, device="cuda")
    bias = torch.randn(OC, dtype=dtype, device="cuda")
    out = awq_linear(x, qweight, scales, qzeros, bias)
    assert out.shape == (*lead, OC)
    ref = awq_gemm_ref(x.reshape(-1, IC).cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu()) + bias.double().cpu()
    assert _err(out.reshape(-1, OC), ref) < TOL[dtype] * 2  # the dense path rounds W and the matmul output


def test_awq_gemm_odd_shapes_decode_and_tensor_core():
    qweight, scales, qzeros = _awq(96 + 32, 8 * 13, 32, torch.float16, seed=11)  # OC = 104
    for M in (5, 19):
        x = torch.randn(M, 128, dtype=torch.float16, device="cuda")
        out = poisoned((M, 104), torch.float16)
        awq_gemm(x, qweight, scales, qzeros, out=out)
        assert _err(out, awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())) < TOL[torch.float16]


@pytest.mark.parametrize("M", [12, 16])
def test_awq_gemm_short_k_split_tile(M):
    """Session 12's 16-token AWQ tile on short-K layers (2 tiles per warp, 2 warps side by side, 3-stage ring): the
    layer that selects it (OC = 14336, IC = 4096), the decode path forced, fp16, G = 128."""
    from cute_kernels.weight_only import config

    assert config.decode_tile("awq", M, 14336, 132, scaled=True, k=4096).stages == config.SCALED_16_SPLIT_RING_STAGES
    qweight, scales, qzeros = _awq(4096, 14336, 128, torch.float16, seed=M)
    x = torch.randn(M, 4096, dtype=torch.float16, device="cuda")
    out = poisoned((M, 14336), torch.float16)
    awq_gemm(x, qweight, scales, qzeros, out=out, path="decode")
    assert not out.isnan().any()
    assert _err(out, awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())) < TOL[torch.float16]


def test_awq_gemm_warm_path_with_out():
    """Repeat calls with ``out=`` take the warm path (session 13) and fill the given tensor; a wrong ``out`` still
    gets the named error."""
    qweight, scales, qzeros = _awq(4096, 4096, 128, torch.float16, 7)
    x = torch.randn(3, 4096, dtype=torch.float16, device="cuda")
    ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    for _ in range(3):
        out = poisoned((3, 4096), torch.float16)
        assert awq_gemm(x, qweight, scales, qzeros, out=out) is out
        torch.cuda.synchronize()
        assert not out.isnan().any() and _err(out, ref) < TOL[torch.float16]
    with pytest.raises(TypeError, match="out"):
        awq_gemm(x, qweight, scales, qzeros, out=torch.empty(3, 4096, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(ValueError, match="out"):
        awq_gemm(x, qweight, scales, qzeros, out=torch.empty(3, 4096, dtype=torch.float16, device="cuda").t())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M", [1, 5, 16, 40, 300])  # decode; WGMMA at 16-300; awq_linear's dense path below
def test_bias_in_the_epilogue(dtype, M):
    """awq_gemm's bias (the kernels' epilogues add it in fp32 before the rounding), through its warm path with other
    bias values, and awq_linear passing it to either path; quantized_mm's on each of its paths."""
    from cute_kernels.formats.bitpack import quantize_weights
    from cute_kernels.reference import quantized_mm_ref
    from cute_kernels.weight_only import quantized_mm

    ic, oc = 1024, 1032
    qweight, scales, qzeros = _awq(ic, oc, 128, dtype, M)
    x = torch.randn(M, ic, device="cuda").to(dtype)
    for call in range(3):  # the second and third through the warm path, each with its own bias
        bias = (torch.randn(oc, device="cuda") * 4).to(dtype)
        ref = awq_gemm_ref(x, qweight, scales, qzeros) + bias.double()
        out = poisoned((M, oc), dtype)
        awq_gemm(x, qweight, scales, qzeros, bias=bias, out=out)
        assert _err(out, ref) < TOL[dtype], f"awq_gemm M={M} call {call}"
    for dense_min_tokens in (None, 1):
        y = awq_linear(x.view(1, M, ic), qweight, scales, qzeros, bias, dense_min_tokens=dense_min_tokens)
        assert _err(y.view(M, oc), ref) < TOL[dtype], f"awq_linear M={M} dense_min_tokens={dense_min_tokens}"
    w_packed, scale, gs = quantize_weights(torch.randn(oc, ic, device="cuda"), 4, 128)
    for path in (None, "decode", "tensor_core", "dense") if M <= 16 else (None, "tensor_core", "dense"):
        for call in range(2):
            bias = (torch.randn(oc, device="cuda") * 4).to(dtype)
            out = quantized_mm(x, w_packed, scale, 4, gs, bias=bias, path=path)
            ref = quantized_mm_ref(x, w_packed, scale, 4, gs) + bias.double()
            assert _err(out, ref) < TOL[dtype], f"quantized_mm M={M} path={path} call {call}"


def _sm90():
    return torch.cuda.get_device_capability()[0] == 9


@pytest.mark.parametrize("one_copy", [False, True], ids=["repack_reader", "one_copy"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sm90_derived_copies(dtype, one_copy, monkeypatch):
    """Session 41: on SM90 the WGMMA path (64, 600 tokens: both fp16 formats) reads one blob built from the checkpoint
    (awq_sm90), never a per-format blob of the repack; the decode tiles (1, 4 tokens) read the K-packed repack, or
    with ``config.AWQ_ONE_COPY`` the same blob (no repack at all). Results match the float64 reference; the derived
    layouts go with the weight."""
    import gc

    from cute_kernels.weight_only import awq_repack, awq_sm90, clear_weight_caches, config, wgmma

    if not _sm90():
        pytest.skip("SM90 only")
    monkeypatch.setattr(config, "AWQ_ONE_COPY", one_copy)
    clear_weight_caches()
    qweight, scales, qzeros = _awq(1024, 1032, 128, dtype, seed=5)
    for m in (1, 4, 64, 600):
        x = torch.randn(m, 1024, dtype=dtype, device="cuda")
        out = poisoned((m, 1032), dtype)
        awq_gemm(x, qweight, scales, qzeros, out=out)
        assert _err(out, awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())) < TOL[dtype], m
    assert awq_repack.cache_size() == (0 if one_copy else 1) and len(wgmma._blobs) == 0
    assert len(awq_sm90._cache) == 1
    aw = next(iter(awq_sm90._cache.values()))
    assert aw.blob.numel() * 8 == 1088 * 1024 // 2  # OC padded to 64-row blocks, 4 bits per weight
    del qweight, aw
    gc.collect()
    assert len(awq_sm90._cache) == 0 and awq_repack.cache_size() == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,OC,IC,G", [(1, 200, 4160, 4160), (3, 1000, 512, 64), (5, 136, 4160, 64),
                                       (1, 14336, 4096, 128), (4, 4104, 4096, 128), (2, 72, 256, 256),
                                       (1, 1032, 1024, 128)])
def test_blob_decode_against_repack_decode(dtype, M, OC, IC, G, monkeypatch):
    """The blob reader (``config.AWQ_ONE_COPY``; x staged whole at one token, per K step above; K of 65 K-tiles, half
    a step past the last whole one; one group or 64-value groups; warps side by side on 14336 rows; large scales on
    1032 x 1024: awq_fma with its 2^e) against the float64 reference with a bias through the warm path, and the
    repack reader forced by ``tile=`` beside it."""
    from cute_kernels.weight_only import awq_repack, config

    if not _sm90():
        pytest.skip("SM90 only")
    monkeypatch.setattr(config, "AWQ_ONE_COPY", True)
    qweight, scales, qzeros = _awq(IC, OC, G, dtype, seed=M * OC + IC)
    if OC == 1032:
        scales = (scales * 4).contiguous()  # max|s| ~ 2: the fp16 words carry s 2^-e, e > 0
    x = torch.randn(M, IC, dtype=dtype, device="cuda")
    ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    awq_repack.clear_cache()
    for call in range(2):
        bias = (torch.randn(OC, device="cuda") * 2).to(dtype)
        out = poisoned((M, OC), dtype)
        awq_gemm(x, qweight, scales, qzeros, bias=bias, out=out, path="decode")
        assert not out.isnan().any()
        assert _err(out, ref + bias.double().cpu()) < TOL[dtype], call
    assert awq_repack.cache_size() == 0  # the blob reader ran: no repack
    tile = config.decode_tile("awq", M, OC, torch.cuda.get_device_properties(0).multi_processor_count, scaled=True,
                              k=IC)
    assert _err(awq_gemm(x, qweight, scales, qzeros, tile=tile), ref) < TOL[dtype]


def test_repack_holds_no_second_copy_of_the_weight():
    """awq_repack unpacks to bytes in chunks of ~8M values and writes them straight into fragment order (session 48):
    its peak CUDA memory beyond its result stays below the weight's own size. Before, int32 nibbles of 2048-row
    chunks and a row-major copy of the whole weight coexisted with the result: ~5x the weight on top at 8192^2."""
    from cute_kernels.formats.awq import unpack_int4
    from cute_kernels.weight_only import awq_repack

    ic = oc = 8192
    qweight = torch.randint(-2**31, 2**31 - 1, (ic, oc // 8), dtype=torch.int32, device="cuda")
    qzeros = torch.randint(-2**31, 2**31 - 1, (ic // 128, oc // 8), dtype=torch.int32, device="cuda")
    scales = (torch.rand(ic // 128, oc, device="cuda") * 0.01 + 0.001).half()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    kw = awq_repack.repack(qweight, scales, qzeros, 128)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - base
    extra = torch.cuda.max_memory_allocated() - base - held
    assert kw.w.numel() == oc * ic // 2  # 32 MB of codes
    assert extra < kw.w.numel(), (extra, kw.w.numel())
    rm = kw.row_major()[:64, :64]  # spot check the bytes against the unpacked checkpoint
    q = unpack_int4(qweight[:128]).t()[:64]
    assert torch.equal(rm.long(), (q[:, 0::2] | (q[:, 1::2] << 4)).long())
