"""GPU tier of fp8_blockwise_scaled_mm: fresh random inputs, NaN-poisoned outputs, against the float64 reference."""

import pytest
import torch

from cute_kernels.configs import TileConfig
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm, shipped_configs
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

pytestmark = pytest.mark.gpu

GROUPWISE, BLOCKWISE = (1, 128, 128), (128, 128, 128)


def _operands(m, n, k, gran, batch=None, mn_major=True, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    lead = () if batch is None else (batch,)
    x = torch.randn((*lead, m, k), device="cuda", generator=g) * 3
    # 128-row blocks of very different magnitude (a scale applied to the wrong block shows), rows within 4x.
    block_mag = torch.exp2(torch.randint(-6, 3, (*lead, -(-n // 128), 1), device="cuda", generator=g).float())
    row_mag = torch.exp2(torch.randint(-2, 1, (*lead, n, 1), device="cuda", generator=g).float())
    w = torch.randn((*lead, n, k), device="cuda", generator=g) * row_mag * block_mag.repeat_interleave(128, -2)[
        ..., :n, :]
    a, a_s = quantize_fp8_per_token_group(x, 128) if gran[0] == 1 else quantize_fp8_blockwise(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    if mn_major:
        a_s, b_s = to_mn_major(a_s), to_mn_major(b_s)
    return a, b, a_s, b_s


def _check(out, a, b, a_s, b_s, gran, out_dtype):
    ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, gran)
    assert out.dtype == out_dtype and out.shape == ref.shape
    assert not torch.isnan(out).any(), "kernel left elements unwritten (NaN poison survived)"
    err = out.double() - ref
    rel = (err.norm() / ref.norm()).item()
    assert rel <= 1e-2, f"relative error {rel:.3g}"
    # Element-wise too, so one wrong row or tile cannot hide in the norm.
    rms = ref.pow(2).mean().sqrt()
    bad = err.abs() > 2e-2 * ref.abs() + 1e-2 * rms
    assert not bad.any(), f"{int(bad.sum())} elements off, first at {bad.nonzero()[0].tolist()}"


SHAPES = [(1, 576, 256), (1, 2112, 7168), (7, 264, 384), (64, 4096, 512), (100, 1000, 640), (129, 576, 1024),
          (300, 2112, 1536), (1024, 7168, 2048), (4097, 576, 512)]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("gran", [GROUPWISE, BLOCKWISE], ids=["groupwise", "blockwise"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_shapes(m, n, k, gran, out_dtype):
    a, b, a_s, b_s = _operands(m, n, k, gran, seed=m * 7 + n + k)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, out_dtype=out_dtype, scale_granularity=gran, out=out)
    _check(out, a, b, a_s, b_s, gran, out_dtype)


@pytest.mark.parametrize("m", [129, 200, 256])
def test_64_wide_tiles_through_the_dispatch(m):
    """129-256 tokens on 2112 x 7168 run 128x64 split-K tiles (session 23) from the table's own call path."""
    from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config

    assert select_config(m, 2112, 7168).tile_n == 64
    a, b, a_s, b_s = _operands(m, 2112, 7168, GROUPWISE, seed=m)
    out = torch.full((m, 2112), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
    _check(out, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)


@pytest.mark.parametrize("m", [65, 97, 128])
def test_mid_m_long_k_64_row_tiles_through_the_dispatch(m):
    """65-128 tokens at K > 8192 on a narrow layer run 64-row split-K tiles when a_scale is staged by TMA (session
    24), through the op's own call path; the a_scale has a 4-row-aligned column stride (``to_tma_aligned_mn_major``),
    so it is TMA-eligible at every M, and the last 64-row token tile moves back (M = 65, 97)."""
    from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config, sfa_tma_eligible

    n, k = 2048, 8448 + 128
    cfg = select_config(m, n, k)
    assert (cfg.tile_m, cfg.cluster_m) == (64, 2)  # the two token tiles in one cluster (session 30)
    a, b, a_s, b_s = _operands(m, n, k, GROUPWISE, mn_major=False, seed=m)
    a_s, b_s = to_tma_aligned_mn_major(a_s), to_mn_major(b_s)
    assert sfa_tma_eligible(a_s, GROUPWISE)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
    _check(out, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)


@pytest.mark.parametrize("m,n,k,batch", [(65, 712, 2048, 1), (100, 2112, 1536, 1), (128, 576, 7168, 1),
                                         (97, 264, 640, 2)])
@pytest.mark.parametrize("staged", [True, False], ids=["tma_sfa", "loaded_sfa"])
def test_mid_m_cluster_through_the_dispatch(m, n, k, batch, staged):
    """65-128 tokens on narrow layers through the op's own call path: two 64-row token tiles in a 2x1 cluster sharing
    the weight tile by multicast (session 30); ragged second token tile, ragged N, a batch, and a_scale both staged
    by TMA (a 4-row-aligned stride) and loaded by the consumers."""
    from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config, sfa_tma_eligible

    assert select_config(m, n, k, batch).cluster_m == 2
    lead = (batch,) if batch > 1 else ()
    a, b, a_s, b_s = _operands(m, n, k, GROUPWISE, batch=batch if batch > 1 else None, mn_major=False, seed=m + n)
    a_s, b_s = (to_tma_aligned_mn_major(a_s) if staged else a_s), to_mn_major(b_s)
    assert sfa_tma_eligible(a_s, GROUPWISE) == staged
    out = torch.full((*lead, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
    _check(out, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)


@pytest.mark.parametrize("m,aligned,tile_n", [(1024, True, 160), (1023, True, 160), (1023, False, 128)])
def test_large_m_width_follows_the_a_scale_layout(m, aligned, tile_n):
    """M = 1023-1024 on 7168 x 2048 through the op's own call path: a TMA-aligned a_scale takes the 128x160 2x1 tile
    (LARGE_M_STAGED_TILE_N_COST, session 24), a plain MN-major one at M = 1023 (loaded by the consumers) 128x128."""
    from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config, sfa_tma_eligible

    n, k = 7168, 2048
    a, b, a_s, b_s = _operands(m, n, k, GROUPWISE, mn_major=False, seed=m)
    a_s, b_s = (to_tma_aligned_mn_major(a_s) if aligned else to_mn_major(a_s)), to_mn_major(b_s)
    staged = sfa_tma_eligible(a_s, GROUPWISE)
    assert staged == aligned and select_config(m, n, k, a_scale_staged=staged).tile_n == tile_n
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
    _check(out, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)


@pytest.mark.parametrize("gran", [GROUPWISE, BLOCKWISE], ids=["groupwise", "blockwise"])
@pytest.mark.parametrize("m", [70, 72])  # 72: batched MN-major per-token scales qualify for TMA staging
def test_batched_and_k_major_scales(gran, m):
    for mn_major in (True, False):
        a, b, a_s, b_s = _operands(m, 264, 384, gran, batch=3, mn_major=mn_major, seed=11)
        out = torch.full((3, m, 264), float("nan"), dtype=torch.bfloat16, device="cuda")
        fp8_blockwise_scaled_mm(a, b, a_s, b_s, scale_granularity=gran, out=out)
        _check(out, a, b, a_s, b_s, gran, torch.bfloat16)


@pytest.mark.parametrize("gran,m", [(GROUPWISE, 333), (GROUPWISE, 336), (BLOCKWISE, 333)],
                         ids=["groupwise", "groupwise-sfa-tma", "blockwise"])
@pytest.mark.parametrize("cfg", shipped_configs(), ids=lambda c: c.describe())
def test_every_shipped_config(cfg, gran, m):
    # N = 712: 160- and 192-wide tiles straddle 128-column scale blocks at varying offsets (several SFB values per
    # tile) and the last tile is ragged. M = 336: the MN-major a_scale has 16-byte strides, so the producer stages
    # it with TMA (M = 333: the consumers load it).
    from cute_kernels.ops.fp8_blockwise_scaled_mm import sfa_tma_eligible

    a, b, a_s, b_s = _operands(m, 712, 768, gran, seed=5)
    assert sfa_tma_eligible(a_s, gran) == (m == 336 and gran == GROUPWISE)
    out = torch.full((m, 712), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, scale_granularity=gran, out=out, config=cfg)
    _check(out, a, b, a_s, b_s, gran, torch.bfloat16)


@pytest.mark.parametrize("gran", [GROUPWISE, BLOCKWISE], ids=["groupwise", "blockwise"])
@pytest.mark.parametrize("m", [1, 5, 17, 33, 63])
def test_swapped_small_m(gran, m):
    # M <= 64 runs the swapped problem (weight rows on WGMMA's M, tokens on its N; per-token scales become the
    # kernel's per-column scales). N = 200: ragged weight tiles of either height; both scale layouts; batched; both
    # weight-tile heights.
    from dataclasses import replace

    from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config

    cfg = select_config(m, 200, 1024)
    assert cfg.swap_ab
    for mn_major, batch, tile_m in ((True, None, 64), (False, None, 128), (True, 2, 128), (False, 3, 64)):
        a, b, a_s, b_s = _operands(m, 200, 1024, gran, batch=batch, mn_major=mn_major, seed=m + tile_m)
        lead = () if batch is None else (batch,)
        out = torch.full((*lead, m, 200), float("nan"), dtype=torch.bfloat16, device="cuda")
        fp8_blockwise_scaled_mm(a, b, a_s, b_s, scale_granularity=gran, out=out, config=replace(cfg, tile_m=tile_m))
        _check(out, a, b, a_s, b_s, gran, torch.bfloat16)


@pytest.mark.parametrize("a_dtype,b_dtype", [(torch.float8_e5m2, torch.float8_e4m3fn),
                                             (torch.float8_e4m3fn, torch.float8_e5m2),
                                             (torch.float8_e5m2, torch.float8_e5m2)], ids=["e5m2-e4m3", "e4m3-e5m2",
                                                                                          "e5m2-e5m2"])
@pytest.mark.parametrize("m", [1, 40, 300])  # swapped, 64-row, 128-row tiles
def test_e5m2_operands(a_dtype, b_dtype, m):
    g = torch.Generator(device="cuda").manual_seed(m)
    x = torch.randn(m, 768, device="cuda", generator=g) * 3
    w = torch.randn(712, 768, device="cuda", generator=g)
    for gran in (GROUPWISE, BLOCKWISE):
        a, a_s = (quantize_fp8_per_token_group(x, 128, dtype=a_dtype) if gran == GROUPWISE
                  else quantize_fp8_blockwise(x, 128, dtype=a_dtype))
        b, b_s = quantize_fp8_blockwise(w, 128, dtype=b_dtype)
        a_s, b_s = to_mn_major(a_s), to_mn_major(b_s)
        out = torch.full((m, 712), float("nan"), dtype=torch.bfloat16, device="cuda")
        fp8_blockwise_scaled_mm(a, b, a_s, b_s, scale_granularity=gran, out=out)
        _check(out, a, b, a_s, b_s, gran, torch.bfloat16)


def test_split_k_matches_unsplit_and_is_deterministic():
    # Decode-size M splits K (fp32 partials through the workspace). Every split count must agree with the unsplit
    # kernel to rounding, and one split count must give bit-identical results run after run (fixed reduction order).
    from cute_kernels.configs import TileConfig

    a, b, a_s, b_s = _operands(5, 2112, 7168, GROUPWISE, seed=3)
    outs = {}
    for split in (1, 3, 8):
        cfg = TileConfig(tile_m=64, tile_n=128, split_k=split)
        runs = []
        for _ in range(3):
            out = torch.full((5, 2112), float("nan"), dtype=torch.bfloat16, device="cuda")
            fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out, config=cfg)
            runs.append(out)
        _check(runs[0], a, b, a_s, b_s, GROUPWISE, torch.bfloat16)
        assert all(torch.equal(runs[0], r) for r in runs[1:]), f"split_k={split}: results differ between runs"
        outs[split] = runs[0]
    for split in (3, 8):
        diff = (outs[split].float() - outs[1].float()).abs().max().item()
        assert diff <= 2e-2 * outs[1].float().abs().max().item(), f"split_k={split} vs unsplit: {diff}"


def test_fast_path_recomputes_and_rechecks():
    # The second call with the same shapes takes the cached path: it must compute on the new data and still
    # reject a bad tensor with a named error.
    for seed in (1, 2):
        a, b, a_s, b_s = _operands(96, 256, 256, GROUPWISE, seed=seed)
        out = torch.full((96, 256), float("nan"), dtype=torch.bfloat16, device="cuda")
        fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
        _check(out, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)
    with pytest.raises((TypeError, ValueError), match="b_scale"):
        fp8_blockwise_scaled_mm(a, b, a_s, b_s.double())


@pytest.mark.parametrize("m,n", [(2048, 2048), (2000, 2112)])
def test_swizzled_schedule(m, n):
    """The swizzled schedule over M clusters that configs.raster_for gives large 2x1-cluster problems, called
    directly on smaller ones (even and ragged edges); every element checked."""
    from cute_kernels.configs import TileConfig
    from cute_kernels.ops.fp8_blockwise_scaled_mm import _compile_sm90

    gran = (1, 128, 128)
    cfg = TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1)
    fn = _compile_sm90(2, torch.bfloat16, gran, cfg, 132, False, torch.float8_e4m3fn, torch.float8_e4m3fn,
                       raster=(4, False))
    a, b, a_s, b_s = _operands(m, n, 256, gran, seed=m)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fn(a, b, out, a_s, b_s, None)
    _check(out, a, b, a_s, b_s, gran, torch.bfloat16)


@pytest.mark.parametrize("raster", [(1, False), (1, True)])
@pytest.mark.parametrize("m,n", [(2048, 2048), (2000, 2112)])
def test_plain_schedule_either_order(m, n, raster):
    """The plain 2x1-cluster schedule N fastest (configs.raster_for's order for an A larger than L2 and a B that
    fits, RASTER_ALONG_N_FOR_LARGE_A) and M fastest, called directly on smaller problems; every element checked."""
    from cute_kernels.ops.fp8_blockwise_scaled_mm import _compile_sm90

    gran = (1, 128, 128)
    cfg = TileConfig(tile_m=128, tile_n=192, cluster_m=2, cluster_n=1)
    fn = _compile_sm90(2, torch.bfloat16, gran, cfg, 132, False, torch.float8_e4m3fn, torch.float8_e4m3fn,
                       raster=raster)
    a, b, a_s, b_s = _operands(m, n, 256, gran, seed=m + 1)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fn(a, b, out, a_s, b_s, None)
    _check(out, a, b, a_s, b_s, gran, torch.bfloat16)


def test_large_m_problem_takes_the_n_fastest_order():
    """A problem whose A exceeds L2 (8192 x 4096 bytes) and whose B does not, through the op: the order it runs is
    the new one, and every element is right."""
    from cute_kernels.configs import raster_for
    from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config

    m, n, k = 8192, 2048, 4096
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = select_config(m, n, k, 1, sms)
    assert raster_for(cfg, m, n, k, 1, sms) == (1, False), cfg.describe()
    a, b, a_s, b_s = _operands(m, n, k, GROUPWISE, seed=3)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
    _check(out, a, b, a_s, b_s, GROUPWISE, torch.bfloat16)


def _tma_able(a_s):
    """a_scale [M, KB] MN-major with its column stride rounded up to 4 floats: TMA-staged at any M."""
    m, kb = a_s.shape
    store = torch.full((kb, -(-m // 4) * 4), float("nan"), device=a_s.device)
    store[:, :m] = a_s.t()
    return store.t()[:m]


# The last token tile moved back to end at the last token (``Sm90GemmKernel.tile_shifts``): groupwise scales only
# (per-token a_scale follows any origin; blockwise rows keep their 128-row blocks, tiles in place). 257 on a 2x1
# cluster has a tile past the last one; 65 runs two 64-row tiles; the swapped configs put the tokens on the N side.
CLAMPED = [(129, 576, 1024, None), (257, 2112, 1536, None), (65, 1000, 640, None), (200, 264, 384, None),
           (40, 1000, 640, TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True)),
           (100, 776, 1024, TileConfig(tile_m=128, tile_n=48, cluster_m=1, cluster_n=1, swap_ab=True, split_k=4))]


@pytest.mark.parametrize("m,n,k,cfg", CLAMPED, ids=lambda v: v.describe() if isinstance(v, TileConfig) else str(v))
@pytest.mark.parametrize("gran", [GROUPWISE, BLOCKWISE], ids=["groupwise", "blockwise"])
@pytest.mark.parametrize("staged", [True, False], ids=["tma_sfa", "loaded_sfa"])
def test_clamped_last_token_tile(m, n, k, cfg, gran, staged):
    a, b, a_s, b_s = _operands(m, n, k, gran, seed=m + n)
    if staged and gran == GROUPWISE:
        a_s = _tma_able(a_s)
    elif not staged:
        a_s = a_s.contiguous()  # K-major: loaded by the consumers
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, scale_granularity=gran, out=out, config=cfg)
    _check(out, a, b, a_s, b_s, gran, torch.bfloat16)


@pytest.mark.parametrize("m,n,k", [(1, 576, 256), (5, 2112, 7168), (100, 1000, 640), (257, 776, 1024),
                                   (1024, 7168, 2048)])
def test_weight_preload_bitwise_equal(m, n, k, monkeypatch):
    """configs.WEIGHT_PRELOAD (session 27): the op's output with the rule's preload of b, with the whole ring (16) and
    without (0) is bit-identical and matches float64 (swapped split-K decode tiles, fewer K-tiles than the preload,
    N not a multiple of 128, 2x1 clusters multicasting b)."""
    from cute_kernels.ops import fp8_blockwise_scaled_mm as op

    a, b, a_s, b_s = _operands(m, n, k, GROUPWISE, mn_major=False, seed=m + n + k)
    a_s, b_s = to_tma_aligned_mn_major(a_s), to_mn_major(b_s)  # a_scale staged by TMA on unswapped tiles
    outs = {}
    for preload in (None, 16, 0):
        monkeypatch.setattr(op, "WEIGHT_PRELOAD_KTILES", preload)
        op._validated.clear()
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        outs[preload] = fp8_blockwise_scaled_mm(a, b, a_s, b_s, out=out)
    op._validated.clear()
    _check(outs[None], a, b, a_s, b_s, GROUPWISE, torch.bfloat16)
    assert torch.equal(outs[None], outs[0]) and torch.equal(outs[16], outs[0])


@pytest.mark.parametrize("m,n,k,batch", [(1, 576, 256, None), (1, 2112, 7168, None), (100, 4096, 1024, None),
                                         (128, 7168, 2048, None), (300, 2112, 1536, None), (1024, 7168, 2048, None),
                                         (7, 264, 384, 3)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_bias_in_the_epilogue(m, n, k, batch, out_dtype):
    """bias [N] added in fp32 before the one rounding: swapped split-K decode tiles, the 2x1 cluster at 65-128
    tokens, split-tail and multi-wave tiles, a batch sharing the bias; the warm path too."""
    gran = GROUPWISE
    a, b, a_s, b_s = _operands(m, n, k, gran, batch=batch, seed=m + n)
    bias = (torch.randn(n, device="cuda") * 8).to(out_dtype)
    shape = ((batch,) if batch else ()) + (m, n)
    out = torch.full(shape, float("nan"), dtype=out_dtype, device="cuda")
    fp8_blockwise_scaled_mm(a, b, a_s, b_s, out_dtype=out_dtype, out=out, bias=bias)
    ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, gran, bias=bias)
    assert not torch.isnan(out).any()
    err = (out.double() - ref).abs()
    assert (err <= 2e-2 * ref.abs() + 1e-2 * ref.pow(2).mean().sqrt()).all(), f"max err {err.max().item():.4g}"
    plain = fp8_blockwise_scaled_mm(a, b, a_s, b_s, out_dtype=out_dtype).double()
    # the bias is really in, once: out - plain is the bias up to the two outputs' roundings
    assert ((out.double() - plain - bias.double()).abs() <= 2 ** -7 * (out.double().abs() + plain.abs()) + 0.05).all()
    assert torch.equal(fp8_blockwise_scaled_mm(a, b, a_s, b_s, out_dtype=out_dtype, bias=bias), out)  # warm path


def test_bias_errors():
    a, b, a_s, b_s = _operands(16, 256, 256, GROUPWISE)
    with pytest.raises(TypeError, match="bias must have dtype bfloat16"):
        fp8_blockwise_scaled_mm(a, b, a_s, b_s, bias=torch.zeros(256, device="cuda"))
    with pytest.raises(ValueError, match=r"bias must have shape \[N\] = \[256\]"):
        fp8_blockwise_scaled_mm(a, b, a_s, b_s, bias=torch.zeros(255, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="bias is on cpu"):
        fp8_blockwise_scaled_mm(a, b, a_s, b_s, bias=torch.zeros(256, dtype=torch.bfloat16))
