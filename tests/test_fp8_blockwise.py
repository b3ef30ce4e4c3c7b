"""CPU tier of fp8_blockwise_scaled_mm: reference semantics, argument errors, and SM90 compile + SASS checks."""

import pytest
import torch

from cute_kernels.formats.fp8 import (dequantize_fp8_blockwise, dequantize_fp8_per_token_group,
                                      quantize_fp8_blockwise, quantize_fp8_per_token_group)
from cute_kernels.formats.scale_layouts import to_mn_major
from cute_kernels.ops.fp8_blockwise_scaled_mm import (build_sm90, check_granularity, fp8_blockwise_scaled_mm,
                                                      select_config, shipped_configs)
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref
from dataclasses import replace

from cute_kernels.configs import TileConfig

F8 = torch.float8_e4m3fn


def _operands(m, n, k, gran=(1, 128, 128), batch=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    x = torch.randn((*lead, m, k), generator=g) * 3
    w = torch.randn((*lead, n, k), generator=g) * 0.05
    if gran[0] == 1:
        a, a_s = quantize_fp8_per_token_group(x, 128)
    else:
        a, a_s = quantize_fp8_blockwise(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    return a, b, to_mn_major(a_s), to_mn_major(b_s)


@pytest.mark.parametrize("gran", [(1, 128, 128), (128, 128, 128)])
def test_reference_is_dequantized_matmul(gran):
    # The float64 reference the GPU tier compares against equals "dequantize both operands, then matmul".
    m, n, k = 130, 136, 384
    a, b, a_s, b_s = _operands(m, n, k, gran, seed=1)
    deq_a = (dequantize_fp8_per_token_group(a, a_s, 128) if gran[0] == 1 else dequantize_fp8_blockwise(a, a_s, 128))
    deq_b = dequantize_fp8_blockwise(b, b_s, 128)
    want = deq_a.double() @ deq_b.double().t()
    got = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, gran)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def _args(m=64, n=256, k=256, gran=(1, 128, 128)):
    return _operands(m, n, k, gran)


@pytest.mark.parametrize("bad,match", [
    (lambda a, b, sa, sb: (a.to(torch.float16), b, sa, sb, {}), "a"),
    (lambda a, b, sa, sb: (a, b.view(torch.int8), sa, sb, {}), "b"),
    (lambda a, b, sa, sb: (a, b, sa.double(), sb, {}), "a_scale"),
    (lambda a, b, sa, sb: (a, b, sa[:-1], sb, {}), "a_scale"),
    (lambda a, b, sa, sb: (a, b, sa, sb[:, :1], {}), "b_scale"),
    (lambda a, b, sa, sb: (a, b, sa, sb, {"scale_granularity": (1, 64, 128)}), "scale_granularity"),
    (lambda a, b, sa, sb: (a, b, sa, sb, {"scale_granularity": (128, 128, 64)}), "scale_granularity"),
    (lambda a, b, sa, sb: (a, b, sa, sb, {"out_dtype": torch.float32}), "out_dtype"),
    (lambda a, b, sa, sb: (a[:, :192], b[:, :192], sa[:, :2], sb[:, :2], {}), "multiple of the K scale"),
    (lambda a, b, sa, sb: (a, b[:252], sa, sb, {}), "multiple of 8"),
    (lambda a, b, sa, sb: (a.t(), b, sa, sb, {}), "a"),
])
def test_argument_errors(bad, match):
    a, b, sa, sb, kw = bad(*_args())
    with pytest.raises((TypeError, ValueError), match=match):
        fp8_blockwise_scaled_mm(a, b, sa, sb, **kw)


def test_granularity_names_and_table():
    assert check_granularity("groupwise") == (1, 128, 128)
    assert check_granularity("blockwise") == (128, 128, 128)
    for k in (2048, 16384):
        for m in (1, 8, 9, 16, 17, 64, 65, 128, 129, 300, 8192):
            cfg = select_config(m, 7168, k)
            # decode-size M swaps A and B (the tokens are the tile's columns, as few as fit M: 16 / 32 / 64) within
            # SWAP_LIMITS: any K up to 8 tokens, K <= 4096 up to 64 (N = 7168: the wave model favours the swap)
            assert cfg.swap_ab == (m <= 8 or (m <= 64 and k <= 4096)) and cfg.tile_n <= 192
            assert not cfg.swap_ab or cfg.tile_n == max(16, 1 << (m - 1).bit_length())
            assert cfg.swap_ab or m > 64 or cfg.tile_m == 64
            # 65-128 tokens, 56 weight tiles (<= 66): two 64-row token tiles (MID_M_64_ROWS; at K = 16384 because
            # a_scale is staged and 112 work tiles of 64 rows fill the wave as the 128-row tile's 56 x 2 slices do)
            assert cfg.tile_m == (64 if m <= 128 else 128)
            assert cfg in shipped_configs() or replace(cfg, split_k=1) in shipped_configs()
            # an a_scale the consumers load keeps the 128-row tile above MID_M_64_ROWS's K
            staged = select_config(m, 7168, k, a_scale_staged=False)
            assert staged.tile_m == (64 if m <= 64 or (m <= 128 and k <= 8192) else 128)
    # N = 24576: 128 unswapped tiles of 64x192 fill the GPU as well as the swapped tiles do - a tie, kept unswapped;
    # at 65-128 tokens its 192 weight tiles keep the 128-row tile
    assert not select_config(1, 24576, 1536).swap_ab
    assert select_config(128, 24576, 1536).tile_m == 128


@pytest.mark.parametrize("n,k,rows", [(7168, 16384, 64), (4096, 14336, 64), (2048, 16384, 64), (8192, 28672, 64),
                                      (5120, 13824, 128), (14336, 4096, 128), (24576, 1536, 128)])
def test_mid_m_long_k_rows(n, k, rows):
    """65-128 tokens with K > 8192 (MID_M_64_ROWS_LONG_K, session 24): 64-row tiles where their work tiles fill
    one wave at least as fully as the 128-row tile's; 5120 x 13824's 64-row problem would take two waves (240 work
    tiles), and the wide layers are not narrow."""
    for m in (65, 97, 128):
        assert select_config(m, n, k).tile_m == rows
        assert select_config(m, n, k, a_scale_staged=False).tile_m == (128 if k > 8192 else rows)
    assert select_config(129, n, k).tile_m == 128


def test_mid_m_rows_run_as_2x1_clusters(monkeypatch):
    """65-128 tokens on narrow layers: the two 64-row token tiles run as one 2x1 cluster that multicasts the weight
    tile (``MID_M_CLUSTER``, session 30); one token tile (<= 64 tokens) and the wide layers keep 1x1; the switch turns
    it off."""
    import cute_kernels.ops.fp8_blockwise_scaled_mm as op

    for n, k in ((7168, 2048), (2112, 7168), (4096, 7168), (7168, 16384), (576, 7168)):
        for m in (65, 96, 128):
            cfg = op.select_config(m, n, k)
            assert (cfg.tile_m, cfg.tile_n, cfg.cluster_m, cfg.cluster_n, cfg.swap_ab) == (64, 128, 2, 1, False)
            assert cfg in op.shipped_configs() and replace(cfg, split_k=1) in op.shipped_configs()
        assert op.select_config(64, n, k).cluster_m == 1
        assert op.select_config(129, n, k).cluster_m == 1
    assert op.select_config(128, 24576, 1536).cluster_m == 1  # 192 weight tiles: not a narrow layer
    monkeypatch.setattr(op, "MID_M_CLUSTER", False)
    assert op.select_config(96, 7168, 2048).cluster_m == 1


def test_swapped_rows_pick_the_weight_tile_height_by_waves():
    # N = 14336: 112 tiles of 128 weight rows fill one wave, 224 of 64 two half-as-long ones - a tie, which goes to
    # the taller tile; N = 7168: 56 tiles of 128 rows leave 76 SMs idle unless K is split, 64 rows (112 tiles) fewer.
    from cute_kernels.configs import size_swapped_tile
    from cute_kernels.ops.fp8_blockwise_scaled_mm import SM90_FP8_BLOCKWISE_TABLE

    row = SM90_FP8_BLOCKWISE_TABLE[0][1]
    assert row.swap_ab
    assert size_swapped_tile(row, 1, 14336, 4096, 1, 132).tile_m == 128
    assert size_swapped_tile(row, 1, 7168, 2048, 1, 132).tile_m == 64
    assert select_config(1, 7168, 2048) == size_swapped_tile(row, 1, 7168, 2048, 1, 132)


def test_unswapped_small_m_switch(monkeypatch):
    import cute_kernels.ops.fp8_blockwise_scaled_mm as op

    monkeypatch.setattr(op, "USE_SWAP_AB", False)
    cfg = op.select_config(1, 7168, 2048)
    assert not cfg.swap_ab and cfg.tile_m == 64


@pytest.mark.parametrize("m,n,k,tile_n", [
    (128, 24576, 1536, 192),  # 192 tiles of 128 columns = two waves on 132 SMs; 128 tiles of 192 = one
    (1024, 2112, 7168, 160),  # 8 x 17 = 136 tiles of 128 (two waves) vs 8 x 14 = 112 of 160
    # session 25: 704 tiles of 192 = 5.3 waves, the last one split in 3 K slices (configs.tail_split), beat 1024 of 128
    # (7.8 waves): 0.93x the time on an H100
    (4096, 4096, 7168, 192),
    (128, 7168, 16384, 128),  # split-K evens the waves out at 128
    # 129-256 tokens (the split 128x128 row) may take 64-wide tiles (session 23): 2 x 17 tiles of 128 x 3 slices
    # = 102 of 132 SMs on 2112 x 7168; 64-wide doubles the tiles. The 7168-row layers keep 128 (64 measured slower).
    (256, 2112, 7168, 64), (129, 4096, 7168, 64), (256, 7168, 16384, 128), (256, 7168, 2048, 128),
    (100, 7168, 16384, 128), (1024, 4096, 7168, 128),
    # session 24: 64-wide only for K <= 8192 and priced 1.05 - the Llama-size layers where it lost keep 128
    (160, 4096, 4096, 64), (160, 14336, 4096, 128), (160, 13824, 5120, 128), (160, 4096, 14336, 128),
    (160, 4096, 11008, 128), (256, 2048, 16384, 128),
])
def test_tile_width_follows_the_wave_model(m, n, k, tile_n):
    assert select_config(m, n, k, 1, 132).tile_n == tile_n


@pytest.mark.parametrize("m,n,k,staged,unstaged", [
    (1024, 7168, 16384, 192, 128), (4096, 7168, 2048, 160, 128), (4096, 24576, 1536, 192, 128),
    (768, 4096, 14336, 192, 192), (2048, 8192, 8192, 192, 128), (4096, 4096, 7168, 192, 128),
    (8192, 8192, 8192, 192, 192),
])
def test_large_m_widths_with_a_staged_a_scale(m, n, k, staged, unstaged):
    """The large-M row prices its widths with LARGE_M_STAGED_TILE_N_COST when a_scale is staged by TMA (which the
    160/192-wide tiles do and the 128-wide one does not; session 24) and with TILE_N_COST otherwise. Since session
    25 the wave count includes the split last wave: 1024 x 7168 x 16384, 2048 x 8192^2 and 4096 x 4096 x 7168 take
    192 (0.93-0.96x the time on an H100)."""
    assert select_config(m, n, k).tile_n == staged
    assert select_config(m, n, k, a_scale_staged=False).tile_n == unstaged


@pytest.mark.parametrize("rank,out_dtype,gran,cfg", [
    (2, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=128, tile_n=128, cluster_m=2)),
    (3, torch.float16, (128, 128, 128), shipped_configs()[0]),
    (2, torch.bfloat16, (128, 128, 128), shipped_configs()[1]),
    (2, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=128, tile_n=192, cluster_m=2)),
    (2, torch.float16, (128, 128, 128), TileConfig(tile_m=64, tile_n=160, split_k=8)),
    (2, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=64, tile_n=64, swap_ab=True, cluster_m=1, split_k=8)),
    (3, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=128, tile_n=16, swap_ab=True, cluster_m=1)),
    (2, torch.float16, (128, 128, 128), TileConfig(tile_m=64, tile_n=32, swap_ab=True, cluster_m=1)),
    (2, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=64, tile_n=48, swap_ab=True, cluster_m=1, split_k=8)),
    (2, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=64, tile_n=128, cluster_m=2, split_k=8)),
], ids=["groupwise-bf16-128x128c2", "blockwise-fp16-batched-64x128-split", "blockwise-bf16-128x128-split",
        "groupwise-bf16-128x192c2", "blockwise-fp16-64x160-split", "groupwise-bf16-swap-64x64-split",
        "groupwise-bf16-batched-swap-128x16", "blockwise-fp16-swap-64x32", "groupwise-bf16-swap-64x48-split",
        "groupwise-bf16-64x128c2-split"])
def test_sm90_compiles_to_qgmma_without_spills(rank, out_dtype, gran, cfg, tmp_path):
    from cute_kernels.sass import summarize_cubin

    fn = build_sm90(rank, out_dtype, gran, cfg, 132, f"--keep-cubin --dump-dir {tmp_path}")
    s = summarize_cubin(fn.artifacts.CUBIN)
    qgmma = [op for op in s.mma if op.startswith("QGMMA.") and "E4M3.E4M3" in op and ".F32." in op]
    assert qgmma, f"no FP8 WGMMA in SASS: {dict(s.mma)}"
    assert sum(s.mma[op] for op in qgmma) >= 4  # one per k-block of a K-tile
    assert not s.spills, f"{s.local_memory_ops} local-memory ops (spills)"
    assert s.instructions["UTMAPF"] >= 2, "TMA L2 prefetch of the first K-tiles (l2_warmup) missing"
    # not serialized by ptxas (a WARPGROUP.DEPBAR after every QGMMA; see the int8 / weight-only SASS tests)
    assert s.text.count("WARPGROUP.DEPBAR") < sum(s.mma[op] for op in qgmma) // 2
    if cfg.tile_m == 64 and cfg.tile_n <= 128:
        # k_pair: the first K-tile's group is waited for while the second one's is still in flight
        assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in s.text


@pytest.mark.parametrize("a_dtype,b_dtype,cfg", [
    (torch.float8_e5m2, torch.float8_e4m3fn, TileConfig(tile_m=128, tile_n=192, cluster_m=2)),
    (torch.float8_e4m3fn, torch.float8_e5m2, TileConfig(tile_m=64, tile_n=16, swap_ab=True, cluster_m=1, split_k=8)),
    (torch.float8_e5m2, torch.float8_e5m2, TileConfig(tile_m=64, tile_n=128, cluster_m=1)),
], ids=["e5m2-e4m3-128x192c2", "e4m3-e5m2-swap-64x16-split", "e5m2-e5m2-64x128"])
def test_e5m2_operands_compile_to_their_qgmma(a_dtype, b_dtype, cfg):
    # Each operand may be e4m3 or e5m2: the QGMMA's type suffix is (kernel A, kernel B), i.e. (b, a) when swapped.
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    s = summarize_cubin(compile_with_artifacts(
        lambda o: build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132, o, a_dtype=a_dtype,
                             b_dtype=b_dtype)).artifacts.CUBIN)
    name = {torch.float8_e4m3fn: "E4M3", torch.float8_e5m2: "E5M2"}
    first, second = (b_dtype, a_dtype) if cfg.swap_ab else (a_dtype, b_dtype)
    assert any(op.startswith("QGMMA.") and op.endswith(f".F32.{name[first]}.{name[second]}") for op in s.mma), s.mma
    assert not s.spills


def test_192_wide_64_row_tiles_fit_their_registers():
    # 64x192 with per-token a_scale loaded by the consumers (a_scale not TMA-able, e.g. odd M): acc + tmp take 192
    # registers per thread; it fits only because a lone consumer warpgroup raises its limit to 256 (Sm90GemmKernel),
    # at the 3-warpgroup limit of 232 ptxas spilled (9 local-memory ops).
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    for cfg in (TileConfig(tile_m=64, tile_n=192, cluster_m=1), TileConfig(tile_m=64, tile_n=192, cluster_m=1, split_k=8)):
        s = summarize_cubin(compile_with_artifacts(
            lambda o: build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132, o)).artifacts.CUBIN)
        assert not s.spills, cfg.describe()
        assert "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0x100" in s.text


def test_rejects_tiles_wider_than_granule():
    from cute_kernels.epilogues import Accumulator, EpilogueTree
    from cute_kernels.sm90.fp8_blockwise import Fp8BlockwiseGemmSm90

    with pytest.raises(ValueError, match="tile_n"):
        Fp8BlockwiseGemmSm90(TileConfig(tile_m=128, tile_n=256), EpilogueTree(Accumulator()), (1, 128, 128))


@pytest.mark.parametrize("mode", ["complete", "issue"])
def test_alternating_warpgroups_option_compiles(monkeypatch, mode):
    # Off by default (both modes measured no faster, see fp8_blockwise.ALTERNATE_WARPGROUPS); kept compiling so they
    # can be re-measured. "issue" hands the turn over between the last QGMMA and the wait for it.
    import cute_kernels.sm90.fp8_blockwise as fb
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    monkeypatch.setattr(fb, "ALTERNATE_WARPGROUPS", mode)
    cfg = TileConfig(tile_m=128, tile_n=128, cluster_m=2)
    s = summarize_cubin(compile_with_artifacts(
        lambda o: build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132, o)).artifacts.CUBIN)
    assert "BAR.ARV" in s.text and not s.spills
    # what follows each K-tile's last QGMMA: the hand-over (issue) or the wait for the WGMMAs (complete)
    seq = ["Q" if "QGMMA" in line else "A" if "BAR.ARV" in line else "D" for line in s.text.splitlines()
           if "QGMMA" in line or "BAR.ARV" in line or "WARPGROUP.DEPBAR" in line]
    after = {seq[i + 1] for i in range(len(seq) - 1) if seq[i] == "Q" and seq[i + 1] != "Q"}
    assert after == ({"A"} if mode == "issue" else {"D"}), seq
    monkeypatch.setattr(fb, "ALTERNATE_WARPGROUPS", "sometimes")
    with pytest.raises(ValueError, match="ALTERNATE_WARPGROUPS"):
        build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132)


@pytest.mark.parametrize("cfg,staged", [
    (TileConfig(tile_m=128, tile_n=192, cluster_m=2), True),
    (TileConfig(tile_m=64, tile_n=128, split_k=8, cluster_m=1), True),
    (TileConfig(tile_m=128, tile_n=128, cluster_m=2), False),  # the staged column would cost an A/B stage (6 -> 5)
])
def test_sfa_tma_stages_a_scale_unless_it_costs_a_stage(cfg, staged):
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    def tma_loads(sfa_tma):
        s = summarize_cubin(compile_with_artifacts(
            lambda o: build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132, o, sfa_tma=sfa_tma)).artifacts.CUBIN)
        assert not s.spills
        return s.instructions.get("UTMALDG", 0), s.instructions.get("LDG", 0)

    (tma_on, ldg_on), (tma_off, ldg_off) = tma_loads(True), tma_loads(False)
    assert (tma_on > tma_off and ldg_on < ldg_off) == staged
    assert (tma_on, ldg_on) == (tma_off, ldg_off) or staged


def test_sfa_tma_eligibility():
    from cute_kernels.ops.fp8_blockwise_scaled_mm import sfa_tma_eligible

    mn_major = to_mn_major(torch.ones(64, 8))  # strides (1, 64)
    assert sfa_tma_eligible(mn_major, (1, 128, 128))
    assert not sfa_tma_eligible(mn_major, (128, 128, 128))  # blockwise: one value per tile, loaded by consumers
    assert not sfa_tma_eligible(torch.ones(64, 8), (1, 128, 128))  # K-major
    assert not sfa_tma_eligible(to_mn_major(torch.ones(63, 8)), (1, 128, 128))  # 252-byte column stride


def test_config_too_large_for_two_ctas_per_sm_is_refused():
    """A TileConfig whose stages do not fit the per-CTA share of shared memory (here a 128 x 192 FP8 tile at two CTAs
    per SM) is a ValueError naming the share, not a launch failure."""
    cfg = TileConfig(tile_m=128, tile_n=192, cluster_m=2, cluster_n=1, ctas_per_sm=2)
    with pytest.raises(ValueError, match="CTAs per SM"):
        build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132)


def test_token_dimension_clamp_follows_the_scales():
    """Which tile origins may move (``Sm90GemmKernel.tile_shifts``): the tokens' dimension where its scales are per
    row / per column - M for groupwise unswapped, N for swapped (the host passes (gN, gM, gK) there) - never a weight
    dimension with 128-row blocks."""
    from cute_kernels.epilogues import Accumulator, EpilogueTree
    from cute_kernels.sm90.fp8_blockwise import Fp8BlockwiseGemmSm90

    tree = EpilogueTree(Accumulator())
    plain = TileConfig(tile_m=128, tile_n=128, cluster_m=2)
    swapped = TileConfig(tile_m=64, tile_n=32, swap_ab=True, cluster_m=1)
    assert Fp8BlockwiseGemmSm90(plain, tree, (1, 128, 128)).clamp == (True, False)
    assert Fp8BlockwiseGemmSm90(plain, tree, (128, 128, 128)).clamp == (False, False)
    assert Fp8BlockwiseGemmSm90(swapped, tree, (128, 1, 128)).clamp == (False, True)
    assert Fp8BlockwiseGemmSm90(swapped, tree, (128, 128, 128)).clamp == (False, False)


# ------------------------------------------------------------------------------- masked grouped (MoE experts)
@pytest.mark.parametrize("cfg,sfa_tma", [
    (TileConfig(tile_m=128, tile_n=128, cluster_m=1, cluster_n=1), True),
    (TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True), False),
    (TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1), False),  # k_pair
])
def test_masked_grouped_variants_compile_to_qgmma_without_spills(cfg, sfa_tma):
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    s = summarize_cubin(compile_with_artifacts(
        lambda o: build_sm90(3, torch.bfloat16, (1, 128, 128), cfg, 132, extra_options=o, sfa_tma=sfa_tma,
                             masked=True)).artifacts.CUBIN)
    assert not s.spills and s.local_memory_ops == 0
    assert s.instructions["QGMMA"] > 0


def test_masked_grouped_config_rules():
    from cute_kernels import fp8_blockwise_grouped_mm
    from cute_kernels.ops.fp8_blockwise_grouped_mm import masked_config

    cfg = masked_config(TileConfig(tile_m=128, tile_n=192, cluster_m=2, cluster_n=1, split_tail=4))
    assert (cfg.cluster_m, cfg.cluster_n, cfg.split_k, cfg.split_tail) == (1, 1, 1, 1) and cfg.tile_n == 192
    with pytest.raises(ValueError, match="masked batches need a 1x1 cluster"):
        build_sm90(3, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1),
                   132, masked=True)
    with pytest.raises(ValueError, match="masked batches: a batched"):
        build_sm90(3, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=128, tile_n=128, cluster_m=1, cluster_n=1,
                                                                split_k=4), 132, masked=True)
    a, b, a_s, b_s = _operands(64, 256, 256, batch=2)
    masked = torch.tensor([3, 4], dtype=torch.int32)
    with pytest.raises(ValueError, match="^a must be 3-D"):
        fp8_blockwise_grouped_mm(a[0], b[0], a_s[0], b_s[0], masked)
    with pytest.raises(ValueError, match="CUDA"):
        fp8_blockwise_grouped_mm(a, b, a_s, b_s, masked)


# ------------------------------------------------------------------------------- contiguous grouped (MoE prefill)
@pytest.mark.parametrize("cfg,gran,sfa_tma", [
    (TileConfig(tile_m=128, tile_n=128, cluster_m=1, cluster_n=1), (1, 128, 128), True),
    (TileConfig(tile_m=128, tile_n=192, cluster_m=1, cluster_n=1), (128, 128, 128), False),
    (TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1), (1, 128, 128), False),  # k_pair
])
def test_contiguous_grouped_variants_compile_to_qgmma_without_spills(cfg, gran, sfa_tma):
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    s = summarize_cubin(compile_with_artifacts(
        lambda o: build_sm90(2, torch.bfloat16, gran, cfg, 132, extra_options=o, sfa_tma=sfa_tma,
                             row_groups=True)).artifacts.CUBIN)
    assert not s.spills and s.local_memory_ops == 0
    assert s.instructions["QGMMA"] > 0


def test_contiguous_grouped_config_rules_and_errors():
    from cute_kernels import fp8_blockwise_grouped_mm_contiguous as contiguous
    from cute_kernels.ops.fp8_blockwise_grouped_mm import contiguous_config

    swapped = TileConfig(tile_m=64, tile_n=32, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)
    cfg = contiguous_config(swapped)
    assert not cfg.swap_ab and cfg.tile_m == 64 and (cfg.cluster_m, cfg.cluster_n, cfg.split_k) == (1, 1, 1)
    cfg = contiguous_config(TileConfig(tile_m=128, tile_n=160, cluster_m=2, cluster_n=1, split_tail=4))
    assert (cfg.tile_n, cfg.cluster_m, cfg.split_tail) == (160, 1, 1)
    with pytest.raises(ValueError, match="row groups need clusters along N only"):
        build_sm90(2, torch.bfloat16, (128, 128, 128), TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1),
                   132, row_groups=True)
    with pytest.raises(ValueError, match="row groups: a 2-d problem"):
        build_sm90(2, torch.bfloat16, (1, 128, 128), swapped, 132, row_groups=True)
    a, _, a_s, _ = _operands(256, 256, 256)
    _, b, _, b_s = _operands(64, 256, 256, batch=3)
    ids = torch.zeros(256, dtype=torch.int32)
    cases = [
        ((a[:200], b, a_s[:200], b_s, ids[:200]), "multiple of 128 rows"),
        ((a, b[0], a_s, b_s[0], ids), "^b must be 3-D"),
        ((a, b, a_s, b_s[:2], ids), "^b_scale must be \\[G=3"),
        ((a, b[:0], a_s, b_s[:0], ids), "at least one expert"),
    ]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            contiguous(*args)
    with pytest.raises(ValueError, match="CUDA"):  # everything else in order: the device is the last rule
        contiguous(a, b, a_s, b_s, ids)
    with pytest.raises(TypeError, match="^m_indices must have dtype"):
        contiguous(a, b, a_s, b_s, ids.long())
