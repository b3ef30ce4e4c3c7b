"""CPU tier of int8_scaled_mm: reference semantics, every validation message, the config table, SASS of every
shipped config (integer WGMMA, no spills), the epilogue tree's variants."""

import pytest
import torch

from cute_kernels import TileConfig, int8_scaled_mm
from cute_kernels.configs import SM90_INT8_TABLE, replace, select_sm90_int8, shipped_sm90_int8_configs
from cute_kernels.epilogues import scaled_mm_tree
from cute_kernels.reference import int8_scaled_mm_ref


def _args(m=32, n=64, k=128, batch=None):
    lead = () if batch is None else (batch,)
    a = torch.randint(-128, 128, (*lead, m, k), dtype=torch.int8)
    b = torch.randint(-128, 128, (*lead, n, k), dtype=torch.int8).transpose(-1, -2)
    return a, b, torch.rand(m), torch.rand(n), torch.randn(n).bfloat16()


def test_reference_matches_naive_loop():
    a, b, sa, sb, bias = _args(3, 8, 16)
    ref = int8_scaled_mm_ref(a, b, sa, sb, bias)
    for i in range(3):
        for j in range(8):
            acc = sum(int(a[i, kk]) * int(b[kk, j]) for kk in range(16))
            want = acc * float(sa[i]) * float(sb[j]) + float(bias[j])
            assert abs(ref[i, j].item() - want) < 1e-9 * max(1.0, abs(want))


def test_reference_int32_bias_enters_before_the_scales():
    a, b, sa, sb, _ = _args(3, 8, 16)
    bias = torch.randint(-2**20, 2**20, (8,), dtype=torch.int32)
    ref = int8_scaled_mm_ref(a, b, sa, sb, bias)
    for i in range(3):
        for j in range(8):
            acc = sum(int(a[i, kk]) * int(b[kk, j]) for kk in range(16))
            want = (acc + int(bias[j])) * float(sa[i]) * float(sb[j])
            assert abs(ref[i, j].item() - want) < 1e-9 * max(1.0, abs(want))


def test_reference_batched_and_scalar_scales():
    a, b, _, _, _ = _args(4, 8, 32, batch=2)
    ref = int8_scaled_mm_ref(a, b, torch.tensor([0.5]), torch.tensor([2.0]))
    assert torch.equal(ref, torch.matmul(a.double(), b.double()))


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda a, b, sa, sb, bias: (a.float(), b, sa, sb, bias), TypeError, "a must have dtype int8; got float32"),
    (lambda a, b, sa, sb, bias: (a, b.to(torch.uint8), sa, sb, bias), TypeError, "b must have dtype int8; got uint8"),
    (lambda a, b, sa, sb, bias: (a[0], b, sa, sb, bias), ValueError, "a must be 2-D or 3-D"),
    (lambda a, b, sa, sb, bias: (a, b[:64], sa, sb, bias), ValueError, "inner dimensions must match"),
    (lambda a, b, sa, sb, bias: (a[:, :120], b[:120], sa, sb, bias), ValueError, "K = 120 must be a positive multiple of 16"),
    (lambda a, b, sa, sb, bias: (a, b[:, :60], sa, sb[:60], bias[:60]), ValueError, "N = 60 must be a multiple of 8"),
    (lambda a, b, sa, sb, bias: (a, b.t().contiguous().t().contiguous(), sa, sb, bias), ValueError, "b must be column-major"),
    (lambda a, b, sa, sb, bias: (a.t().contiguous().t(), b, sa, sb, bias), ValueError, "a must be contiguous in its last"),
    (lambda a, b, sa, sb, bias: (a, b, sa.double(), sb, bias), TypeError, "a_scale must have dtype float32"),
    (lambda a, b, sa, sb, bias: (a, b, sa[:5], sb, bias), ValueError, r"a_scale must have shape \[32\] or \[1\]"),
    (lambda a, b, sa, sb, bias: (a, b, sa, sb[:7], bias), ValueError, r"b_scale must have shape \[64\] or \[1\]"),
    (lambda a, b, sa, sb, bias: (a, b, sa, sb, bias.half()), TypeError, "bias must have dtype bfloat16, int32"),
    (lambda a, b, sa, sb, bias: (a, b, sa, sb, bias.long()), TypeError, "bias must have dtype bfloat16, int32"),
    (lambda a, b, sa, sb, bias: (a, b, sa, sb, bias[:8]), ValueError, r"bias must have shape \(64,\)"),
    (lambda a, b, sa, sb, bias: (a, b, sa, sb, bias), ValueError, "a must be a CUDA tensor; got a tensor on cpu"),
    (lambda a, b, sa, sb, bias: (a[:0], b, sa[:0], sb, bias), ValueError, "a must be a CUDA tensor"),  # M = 0 is valid
])
def test_validation_messages(mutate, exc, match):
    with pytest.raises(exc, match=match):
        int8_scaled_mm(*mutate(*_args()))


def test_validation_batch_and_out_dtype():
    a, b, sa, sb, bias = _args(batch=2)
    with pytest.raises(ValueError, match="batch sizes differ"):
        int8_scaled_mm(a, b[:1], sa, sb, bias)
    with pytest.raises(TypeError, match="out_dtype must be torch.float16, torch.bfloat16 or torch.float32"):
        int8_scaled_mm(a, b, sa, sb, None, out_dtype=torch.int32)
    with pytest.raises(ValueError, match="b must be 3-D"):
        int8_scaled_mm(a, b[0], sa, sb, bias)


def test_config_table_buckets():
    assert select_sm90_int8(1, 4096, 4096).swap_ab and select_sm90_int8(1, 4096, 4096).tile_n == 16
    assert select_sm90_int8(32, 4096, 4096).tile_n == 32
    assert select_sm90_int8(8192, 8192, 8192) == TileConfig(tile_m=128, tile_n=256, cluster_m=1, cluster_n=2,
                                                            split_tail=4)
    assert all(select_sm90_int8(m, 4096, 4096).split_k > 1 for m in (1, 16, 32, 64, 128))
    assert not select_sm90_int8(1024, 4096, 4096).swap_ab
    # widths by the wave model (configs.fit_tile_width): 129-512 tokens on a 4096-wide layer fill the SMs with 128x64
    # tiles; 14336-row layers take 224-wide tiles at 1024 tokens; 8192^3 and a whole wave of 128x128 keep their width
    assert select_sm90_int8(256, 4096, 4096) == TileConfig(tile_m=128, tile_n=64, cluster_m=2, cluster_n=1,
                                                           split_tail=4)
    assert select_sm90_int8(192, 4096, 14336).tile_n == 64
    assert select_sm90_int8(512, 4096, 4096).tile_n == 128 and select_sm90_int8(384, 4096, 4096).tile_n == 128
    assert select_sm90_int8(256, 14336, 4096).tile_n == 128
    assert select_sm90_int8(1024, 14336, 4096) == TileConfig(tile_m=128, tile_n=224, cluster_m=1, cluster_n=2,
                                                             split_tail=4)
    assert select_sm90_int8(4096, 14336, 4096).tile_n == 256
    # session 24: 128x64 priced 1.2 per column - 13824 x 5120 at 384 / 512 tokens keeps 128 (64 measured 1.13-1.26x
    # slower), 11008 x 4096 at 200 tokens and 2048 x 16384 at 512 still take 64 (1.10x / 1.26x faster)
    assert select_sm90_int8(384, 13824, 5120).tile_n == 128 and select_sm90_int8(512, 13824, 5120).tile_n == 128
    assert select_sm90_int8(200, 11008, 4096).tile_n == 64 and select_sm90_int8(512, 2048, 16384).tile_n == 64
    # monotone buckets, last row covers everything
    bounds = [mx for mx, _ in SM90_INT8_TABLE]
    assert bounds == sorted(bounds) and bounds[-1] >= 2**62


@pytest.mark.parametrize("kwargs,match", [
    (dict(tile_m=96), "tile_m must be 64 or 128"), (dict(tile_n=12), "tile_n must be a multiple of 16"),
    (dict(tile_n=56), "tile_n must be a multiple of 16"), (dict(tile_n=8), "tile_n must be a multiple of 16"),
    (dict(cluster_m=3), "cluster_m must be 1, 2 or 4"), (dict(cluster_m=4, cluster_n=2), "cluster size must be <= 4"),
    (dict(ctas_per_sm=0), "ctas_per_sm must be 1, 2, 3 or 4"), (dict(ctas_per_sm=5), "ctas_per_sm must be 1, 2, 3 or 4"),
])
def test_tile_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TileConfig(**kwargs)


def test_epilogue_tree_variants_have_distinct_keys():
    keys = {scaled_mm_tree(a, b, bias, swap).key for a in ("vector", "scalar") for b in ("vector", "scalar")
            for bias in (True, False) for swap in (True, False)}
    assert len(keys) == 15  # scalar x scalar without bias is the same tree whether or not A/B are swapped
    assert scaled_mm_tree("vector", "vector", True).operand_names == ("a_scale", "b_scale", "bias")
    assert scaled_mm_tree("scalar", "vector", False).operand_names == ("a_scale", "b_scale")
    with_c = scaled_mm_tree("vector", "vector", True, source=True)
    assert with_c.operand_names == ("a_scale", "b_scale", "bias", "c")
    assert with_c.key != scaled_mm_tree("vector", "vector", True).key and ("matrix", "c") in with_c.key


def test_accumulator_bias_is_added_before_the_scales():
    # (acc + bias) * a_scale * b_scale: the add sits innermost, on the accumulator; the output-dtype bias outermost.
    pre = scaled_mm_tree("vector", "vector", "acc")
    assert pre.key == ("mul", ("mul", ("add", ("acc",), ("RowVector", "bias")), ("ColVector", "a_scale")),
                       ("RowVector", "b_scale"))
    assert scaled_mm_tree("vector", "vector", "out").key == scaled_mm_tree("vector", "vector", True).key
    assert scaled_mm_tree("vector", "vector", True).key[0] == "add"
    # swapped A/B: the bias indexes the kernel's m (the output's n), like b_scale
    assert ("ColVector", "bias") in scaled_mm_tree("vector", "vector", "acc", swap_ab=True).key[1][1]
    # the launch's operand order is the same for both placements (found on the GPU: the walk order put bias first)
    assert pre.operand_names == scaled_mm_tree("vector", "vector", True).operand_names == ("a_scale", "b_scale", "bias")
    assert scaled_mm_tree("vector", None, "acc", source=True).operand_names == ("a_scale", "bias", "c")
    with pytest.raises(ValueError, match="bias kind must be one of"):
        scaled_mm_tree("vector", "vector", "before")


@pytest.mark.parametrize("cfg", [select_sm90_int8(1, 4096, 4096), select_sm90_int8(4096, 4096, 4096)],
                         ids=["swapped", "plain"])
def test_int32_bias_variant_sass(cfg):
    """The accumulator-bias epilogue compiles like the others: integer WGMMA, no spills."""
    from cute_kernels.ops.int8_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    fn = compile_with_artifacts(lambda opts: build_sm90(2, "vector", "vector", "acc", torch.bfloat16, cfg,
                                                        extra_options=opts))
    s = summarize_cubin(fn.artifacts.CUBIN)
    assert any(op.startswith("IGMMA") and ".S8.S8" in op for op in s.mma), dict(s.mma)
    assert s.local_memory_ops == 0


@pytest.mark.parametrize("cfg", shipped_sm90_int8_configs(), ids=lambda c: c.describe().replace(" ", "_"))
def test_shipped_config_sass(cfg):
    """Every config the table can pick compiles for sm_90a to integer WGMMA with no local-memory traffic."""
    from cute_kernels.ops.int8_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    # with the largest weight preload the op uses (configs.WEIGHT_PRELOAD): its code is that of every preload count
    fn = compile_with_artifacts(lambda opts: build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg,
                                                        extra_options=opts, weight_preload=8))
    s = summarize_cubin(fn.artifacts.CUBIN)
    igmma = [op for op in s.mma if op.startswith("IGMMA") and ".S8.S8" in op]
    assert igmma, f"no signed int8 WGMMA in SASS: {dict(s.mma)}"
    assert all(f"x{cfg.tile_n}x32" in op for op in igmma), igmma
    assert s.local_memory_ops == 0, f"{s.local_memory_ops} LDL/STL instructions (spills)"
    assert "USETMAXREG" in s.instructions, "setmaxnreg register reallocation missing"
    assert "UTMALDG" in s.instructions and "UTMASTG" in s.instructions, "TMA load/store missing"
    # programmatic dependent launch: griddepcontrol.wait (ACQBULK) before any global access, launch_dependents
    assert "ACQBULK" in s.instructions and "PREEXIT" in s.instructions, "griddepcontrol (PDL) missing"
    # the first K-tiles' L2 prefetch before the PDL wait (Sm90GemmKernel.l2_warmup), one per operand and K-tile
    assert s.instructions["UTMAPF"] >= 2, "TMA L2 prefetch (l2_warmup) missing"
    assert _tma_loads_before_pdl_wait(s.text) > 0, "weight preload (a TMA load before the PDL wait) missing"
    # the diagnostic timeline (benchmarks/experiments/timeline.py) compiles to nothing in a shipped build
    assert "SR_GLOBALTIMER" not in s.text, "timeline stamps in a shipped build"
    # WGMMAs not serialized: ptxas puts a WARPGROUP.DEPBAR after every IGMMA when it cannot prove no other instruction
    # touches the accumulator inside a WGMMA group (C7514; the unsplit small swapped tiles had 12 of 12 until the
    # accumulator's zero fill became the first WGMMA's ACCUMULATE flag, session 20)
    assert s.text.count("WARPGROUP.DEPBAR") < sum(s.mma.values()) // 2, (s.text.count("WARPGROUP.DEPBAR"), dict(s.mma))


def test_split_fixup_has_one_gpu_scope_fence():
    """The split-K fix-up publishes and acquires through one thread's acq_rel atomic between two CTA barriers: one
    GPU-scope MEMBAR on the path (a fence per thread on both sides put three in a row, ~1 µs at M = 1, N = K = 4096
    on an H100, session 13), and the atomic's acquire still invalidates L1 before the stripes are read."""
    from cute_kernels.ops.int8_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    cfg = select_sm90_int8(1, 4096, 4096)
    assert cfg.split_k > 1
    fn = compile_with_artifacts(lambda opts: build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg,
                                                        extra_options=opts))
    text = summarize_cubin(fn.artifacts.CUBIN).text
    assert text.count("MEMBAR.ALL.GPU") == 1, text.count("MEMBAR.ALL.GPU")
    assert "ATOMG.E.ADD.STRONG.GPU" in text and "CCTL.IVALL" in text


def test_batched_fp16_scalar_variant_compiles():
    from cute_kernels.ops.int8_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    fn = compile_with_artifacts(lambda opts: build_sm90(3, "scalar", "scalar", False, torch.float16,
                                                        TileConfig(tile_m=64, tile_n=64, cluster_m=1),
                                                        extra_options=opts))
    s = summarize_cubin(fn.artifacts.CUBIN)
    assert any(op.startswith("IGMMA.64x64x32.S8.S8") for op in s.mma) and not s.spills


def test_split_k_plan_fills_the_gpu_and_respects_limits():
    from cute_kernels.ops.split_k import plan_split_k

    cfg = select_sm90_int8(1, 4096, 4096)  # 64-row weight tiles -> 64 tiles for N=4096
    slices, ws, sems, head = plan_split_k(cfg, 4096, 1, 4096, 1, 132)
    assert slices == 2 and sems == 64 and ws == 64 * 2 * cfg.tile_m * cfg.tile_n and head == 0
    assert plan_split_k(cfg, 4096, 1, 16, 1, 132)[0] == 1  # one K-tile: nothing to split
    assert plan_split_k(cfg, 64, 1, 8192, 1, 132)[0] == cfg.split_k  # one tile: as many slices as allowed


def test_single_slice_plans_run_the_unsplit_variant():
    from cute_kernels.ops.split_k import resolve_split

    cfg = select_sm90_int8(1, 14336, 4096)  # 112 weight tiles of 128 rows: one wave, no split
    run_cfg, split = resolve_split(cfg, 1, 14336, 4096, 1, 132)
    assert cfg.split_k > 1 and split is None and run_cfg.split_k == 1 and run_cfg.tile_m == cfg.tile_m
    assert run_cfg in shipped_sm90_int8_configs()  # CI compiles the variant the host will run
    cfg = select_sm90_int8(1, 4096, 4096)
    run_cfg, split = resolve_split(cfg, 1, 4096, 4096, 1, 132)
    assert run_cfg == cfg and split[0] == 2


def test_launch_planned_appends_the_split_operands(monkeypatch):
    from cute_kernels.ops import split_k

    calls = []
    fn = lambda *args: calls.append(args)  # noqa: E731 - a stand-in for a compiled launch
    split_k.launch_planned(fn, ("a", "b"), None, "dev")
    monkeypatch.setattr(split_k, "split_workspace", lambda dev, ws, sem, dtype: (("ws", ws, dtype), ("sem", sem)))
    split_k.launch_planned(fn, ("a", "b"), (3, 100, 7, 5), "dev", "f32")
    assert calls == [("a", "b"), ("a", "b", ("ws", 100, "f32"), ("sem", 7), 3, 5)]


def test_k_beyond_int32_accumulation_is_refused():
    from cute_kernels.ops.int8_scaled_mm import MAX_K

    assert MAX_K * 128 * 128 < 2**31 and (MAX_K + 16) * 128 * 128 >= 2**31 - 2**14 * 16
    k = MAX_K + 16
    a = torch.empty(2, k, dtype=torch.int8)
    b = torch.empty(8, k, dtype=torch.int8).t()
    with pytest.raises(ValueError, match=f"K = {k} exceeds {MAX_K}: the int32 accumulator could overflow"):
        int8_scaled_mm(a, b, torch.ones(2), torch.ones(8))


def test_warm_path_memo_is_bounded():
    import importlib

    from cute_kernels.plan_cache import PlanCache

    mod = importlib.import_module  # the packages re-export functions under the modules' names
    int8_op, fp8_op = mod("cute_kernels.ops.int8_scaled_mm"), mod("cute_kernels.ops.fp8_blockwise_scaled_mm")
    awq, qmm, launch = (mod("cute_kernels.weight_only.awq"), mod("cute_kernels.weight_only.quantized_mm"),
                        mod("cute_kernels.sm80.launch"))

    memo = PlanCache(capacity=3)
    for i in range(7):
        memo[("sig", i)] = i
        assert len(memo) <= 3 and memo[("sig", i)] == i
    memo[("sig", 6)] = 60  # overwriting an entry never clears
    assert len(memo) == 1 + (6 % 3) and memo[("sig", 6)] == 60
    for cache in (int8_op._validated, fp8_op._validated, awq._plans, qmm._plans, launch._PLANS):
        assert isinstance(cache, PlanCache)


@pytest.mark.parametrize("c_dtype", [torch.float32, torch.bfloat16])
def test_added_operand_variant_compiles(c_dtype):
    """The ``c`` variant (a full [M, N] operand added in the epilogue; the p2p reduce-scatter's own-block GEMM)."""
    from cute_kernels.configs import select_sm90_int8
    from cute_kernels.ops.int8_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    cfg = replace(select_sm90_int8(4096, 8192, 8192, 1, 132), split_tail=1)  # as the op runs it with c
    fn = compile_with_artifacts(lambda opts: build_sm90(2, "vector", "vector", False, torch.bfloat16, cfg,
                                                        extra_options=opts, c_dtype=c_dtype))
    s = summarize_cubin(fn.artifacts.CUBIN)
    assert any(op.startswith("IGMMA") for op in s.mma) and s.local_memory_ops == 0
    assert any(op.startswith("LDG") for op in s.instructions), "the c operand is read from global memory"


def test_added_operand_errors():
    from cute_kernels.ops.int8_scaled_mm import int8_scaled_mm

    a = torch.zeros(16, 32, dtype=torch.int8)
    b = torch.zeros(16, 32, dtype=torch.int8).t()
    s1, s2 = torch.ones(16), torch.ones(16)
    with pytest.raises(ValueError, match="c must have shape"):
        int8_scaled_mm(a, b, s1, s2, c=torch.zeros(16, 8))
    with pytest.raises(TypeError, match="c must have dtype"):
        int8_scaled_mm(a, b, s1, s2, c=torch.zeros(16, 16, dtype=torch.int32))


def test_raster_rule():
    """Large unsplit problems on 2-CTA clusters whose walked operand exceeds L2 get a swizzled schedule over the
    clusters' dimension, by a swizzle that divides the cluster count; 2x1 clusters whose A exceeds L2 and B does not
    walk N fastest; everything else keeps the plain M-fastest order (configs.raster_for)."""
    from cute_kernels.configs import raster_for

    big = select_sm90_int8(8192, 8192, 8192)
    assert (big.cluster_m, big.cluster_n) == (1, 2)
    assert raster_for(big, 8192, 8192, 8192) == (4, True)  # 16 N clusters, A = 64 MB
    assert raster_for(big, 8192, 8192 - 512, 8192) == (1, True)  # 15 N clusters: neither 4 nor 2 divides
    assert raster_for(big, 8192, 8192 - 1024, 8192) == (2, True)  # 14 N clusters
    assert raster_for(big, 4096, 14336, 4096) == (1, True)  # A = 16 MB stays in L2 (1-2% slower swizzled)
    assert raster_for(big, 8192, 4096, 14336) == (4, True)  # A = 117 MB
    assert raster_for(big, 4096, 4096, 16384) == (1, True)  # 512 tiles: under 4 waves of 132
    assert raster_for(big, 4096, 4096, 16384, batch=2) == (4, True)  # batches count toward the waves
    two_by_one = TileConfig(tile_m=128, tile_n=192, cluster_m=2, cluster_n=1)
    assert raster_for(two_by_one, 8192, 8192, 8192) == (4, False)  # 32 M clusters; B = 64 MB
    assert raster_for(two_by_one, 8192, 2048, 8192) == (1, False)  # B = 16 MB, A = 64 MB: N fastest
    assert raster_for(two_by_one, 4096, 4096, 4096) == (1, True)  # both 16 MB
    assert raster_for(select_sm90_int8(1, 4096, 4096), 4096, 1, 4096) == (1, True)  # swapped / split rows
    one_cta = TileConfig(tile_m=128, tile_n=256, cluster_m=1, cluster_n=1)
    assert raster_for(one_cta, 8192, 8192, 8192) == (1, True)


@pytest.mark.parametrize("raster", [(4, True), (2, False)])
def test_swizzled_schedule_compiles(raster):
    """The swizzled schedule compiles to the same kernel body: integer WGMMA, no spills."""
    from cute_kernels.ops.int8_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    cfg = select_sm90_int8(8192, 8192, 8192)
    fn = compile_with_artifacts(lambda opts: build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg,
                                                        extra_options=opts, raster=raster))
    s = summarize_cubin(fn.artifacts.CUBIN)
    assert any(op.startswith("IGMMA") for op in s.mma) and s.local_memory_ops == 0


@pytest.mark.parametrize("tile_m,tile_n,swap", [(64, 48, True), (128, 80, True), (64, 112, True), (128, 96, True),
                                                (128, 224, False), (128, 160, False), (128, 192, False),
                                                (128, 256, False), (64, 16, True)])
def test_epilogue_sub_tiles_divide_the_tile(tile_m, tile_n, swap):
    """The epilogue walks the CTA tile in sub-tiles; one that does not divide it stores columns of the next tile
    (session 22: 48/80/112-wide tiles in 32-wide sub-tiles gave wrong results once a problem had several tiles)."""
    import re

    from cute_kernels.layouts import sm90_gemm_layouts

    cfg = TileConfig(tile_m=tile_m, tile_n=tile_n, cluster_m=1, cluster_n=1, swap_ab=swap)
    text = sm90_gemm_layouts(cfg)
    epi_m, epi_n = (int(v) for v in re.search(r"epilogue tile\s*: \((\d+), (\d+)\)", text).groups())
    assert tile_m % epi_m == 0 and tile_n % epi_n == 0, (epi_m, epi_n)


@pytest.mark.parametrize("family", ["int8", "fp8", "awq"])
def test_timeline_diagnostic_build(family, monkeypatch):
    """benchmarks/experiments/timeline.py's builds (the base kernel with a timeline tensor): they compile for sm_90a,
    read the global timer, and keep the shipped kernel's tensor-core ops and register budget (no spills)."""
    import sys
    from pathlib import Path

    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    root = Path(__file__).resolve().parents[1]
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    monkeypatch.syspath_prepend(str(root / "benchmarks" / "experiments"))
    sys.modules.pop("timeline", None)
    import timeline

    plain = timeline._compile_with_timeline
    monkeypatch.setattr(timeline, "_compile_with_timeline", lambda *a, **kw: compile_with_artifacts(
        lambda o: plain(*a, **{**kw, "opts": "--enable-tvm-ffi --gpu-arch sm_90a " + o})))
    if family == "int8":
        fn = timeline.build_int8_timeline(16, 4096, 4096, 132)[0]
        mma = "IGMMA"
    elif family == "fp8":
        fn = timeline.build_fp8_timeline(64, 7168, 16384, 132)[0]
        mma = "QGMMA"
    else:
        fn = timeline.build_wo_timeline("awq", 16, 8192, 8192, 128, 132)[0]
        mma = "HGMMA"
    s = summarize_cubin(fn.artifacts.CUBIN)
    assert s.text.count("SR_GLOBALTIMER") >= 5, s.text.count("SR_GLOBALTIMER")
    assert any(op.startswith(mma) for op in s.mma), dict(s.mma)
    assert s.local_memory_ops == 0


def _tma_loads_before_pdl_wait(text: str) -> int:
    """TMA loads (UTMALDG) the SASS places before the first griddepcontrol.wait (ACQBULK)."""
    head = text[:text.index("ACQBULK")]
    return head.count("UTMALDG")


@pytest.mark.parametrize("family", ["int8-swapped-split", "int8-1x2", "fp8-swapped-split", "fp8-2x1-mcast-b",
                                    "int1-wgmma", "int2-g128-wgmma", "awq-small-wgmma"])
def test_weight_preload_before_pdl_wait(family):
    """``Sm90GemmKernel.weight_preload`` (session 27): the producer TMAs the weight's first K-tiles into the ring
    before the PDL wait - a TMA load ahead of ACQBULK in SASS, none without the option - with the tensor-core ops and
    no spills; covers the weight as A (swapped) and as B (plain), B multicast in a 2x1 cluster, and the weight-only
    path's staged group parameters (loaded with the weight)."""
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    def build(preload):
        if family.startswith("int8"):
            from cute_kernels.ops.int8_scaled_mm import build_sm90
            cfg = select_sm90_int8(16, 4096, 4096) if family == "int8-swapped-split" else select_sm90_int8(
                4096, 4096, 4096)
            return "IGMMA", lambda o: build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg, extra_options=o,
                                                 weight_preload=preload)
        if family.startswith("fp8"):
            from cute_kernels.ops.fp8_blockwise_scaled_mm import build_sm90
            cfg = (TileConfig(tile_m=64, tile_n=16, swap_ab=True, cluster_m=1, split_k=8)
                   if family == "fp8-swapped-split" else TileConfig(tile_m=128, tile_n=192, cluster_m=2))
            return "QGMMA", lambda o: build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132, o,
                                                 weight_preload=preload)
        from cute_kernels.weight_only import wgmma
        if family == "awq-small-wgmma":  # the 64-row, two-CTAs-per-SM tile with the shipped small-layer options
            cfg = wgmma.select_config(16, 4096, 4096)
            opts = dict(wgmma.stage_options(4, cfg, 4096, 4096)) if preload else {}
            return "HGMMA", lambda o: wgmma.build("awq", torch.float16, torch.float16, True, 128, cfg,
                                                  extra_options=o, kernel_options=opts)
        bits, scaled = (1, False) if family == "int1-wgmma" else (2, True)
        cfg = wgmma.select_config(16, 8192, 8192)
        opts = {"weight_preload": preload} if preload else {}
        return "HGMMA", lambda o: wgmma.build(f"int{bits}", torch.float16, torch.float16, scaled,
                                              128 if scaled else wgmma.NO_GROUP, cfg, extra_options=o,
                                              kernel_options=opts)

    for preload in (0, 8):
        mma, compile_fn = build(preload)
        s = summarize_cubin(compile_with_artifacts(compile_fn).artifacts.CUBIN)
        assert any(op.startswith(mma) for op in s.mma), dict(s.mma)
        assert s.local_memory_ops == 0
        early = _tma_loads_before_pdl_wait(s.text)
        assert (early > 0) == (preload > 0), (preload, early)


def test_weight_preload_rule(monkeypatch):
    """configs.WEIGHT_PRELOAD by op and token count, the weight-only rule (1/2-bit weights; 4-bit on split 16-token
    tiles, with the L2 warm-up off), and the off switch."""
    from cute_kernels import configs
    from cute_kernels.weight_only import wgmma

    assert configs.weight_preload_ktiles("int8", 1) == 8 and configs.weight_preload_ktiles("int8", 64) == 8
    assert configs.weight_preload_ktiles("int8", 65) == 4 and configs.weight_preload_ktiles("int8", 8192) == 4
    assert configs.weight_preload_ktiles("fp8", 16) == 8 and configs.weight_preload_ktiles("fp8", 17) == 4
    cfg = wgmma.select_config(16, 8192, 8192)
    assert dict(wgmma.stage_options(1, cfg, 8192, 8192)).get("weight_preload") == wgmma.PRELOAD_LOW_BIT_STAGES
    assert dict(wgmma.stage_options(2, cfg, 8192, 8192)).get("weight_preload") == wgmma.PRELOAD_LOW_BIT_STAGES
    small = wgmma.select_config(16, 4096, 4096)
    for c, n, k in ((small, 4096, 4096), (cfg, 8192, 8192)):  # split 16-token tiles (4 and 2 slices)
        assert c.split_k > 1
        assert dict(wgmma.stage_options(4, c, n, k)) == {"weight_preload": wgmma.PRELOAD_4BIT_STAGES, "l2_warmup": 0}
    unsplit = wgmma.select_config(16, 14336, 4096)
    assert unsplit.split_k == 1 and "weight_preload" not in dict(wgmma.stage_options(4, unsplit, 14336, 4096))
    assert "weight_preload" not in dict(wgmma.stage_options(4, wgmma.select_config(32, 4096, 4096), 4096, 4096))
    monkeypatch.setattr(configs, "WEIGHT_PRELOAD_ENABLED", False)
    assert configs.weight_preload_ktiles("int8", 1) == 0 and configs.weight_preload_ktiles("fp8", 4096) == 0
    assert "weight_preload" not in dict(wgmma.stage_options(1, cfg, 8192, 8192))
    assert wgmma.stage_options(4, small, 4096, 4096) == ()


@pytest.mark.parametrize("family", ["int8", "fp8", "awq"])
def test_split_cluster_reduces_through_dsmem(family):
    """``Sm90GemmKernel.split_cluster`` (session 28): the K slices of a tile run as one cluster and meet in rank 0's
    shared memory - 16-byte st.async stores (STAS.128, a thread's accumulator / 4 of them), the cluster barrier
    after the barrier init (UCGABAR), and none of the workspace fix-up's GPU-scope fence or semaphore atomic; the
    tensor-core ops and no spills."""
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    if family == "int8":
        from cute_kernels.ops.int8_scaled_mm import build_sm90
        cfg, mma, per_thread = TileConfig(tile_m=64, tile_n=16, cluster_m=1, swap_ab=True), "IGMMA", 64 * 16 // 128
        fn = lambda o: build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg, extra_options=o,
                                  weight_preload=8, split_cluster=2)
    elif family == "fp8":
        from cute_kernels.ops.fp8_blockwise_scaled_mm import build_sm90
        cfg, mma, per_thread = TileConfig(tile_m=64, tile_n=16, cluster_m=1, swap_ab=True), "QGMMA", 64 * 16 // 128
        fn = lambda o: build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132, o, weight_preload=8, split_cluster=2)
    else:
        from cute_kernels.weight_only import wgmma
        cfg, mma, per_thread = TileConfig(tile_m=128, tile_n=16, cluster_m=1), "HGMMA", 128 * 16 // 256
        fn = lambda o: wgmma.build("awq", torch.float16, torch.float16, True, 128, cfg, extra_options=o,
                                   kernel_options={"split_cluster": 2})
    s = summarize_cubin(compile_with_artifacts(fn).artifacts.CUBIN)
    assert any(op.startswith(mma) for op in s.mma), dict(s.mma)
    assert s.local_memory_ops == 0
    assert s.text.count("STAS.128") == per_thread // 4
    assert "UCGABAR_WAIT" in s.text
    assert "MEMBAR.ALL.GPU" not in s.text and "ATOM" not in s.text


def test_cluster_rank1_share_rule():
    """``ops.split_k.cluster_rank1_share`` (session 29): rank 1 of a two-CTA int8 cluster streams 6/16 of K up to
    K = 8192 and 7/16 above; FP8, the weight-only path and every other split keep halves. The kernel refuses a share
    outside 1..8 or an uneven share without a two-CTA cluster, and the export CLI reports what the op runs."""
    from cute_kernels.epilogues import scaled_mm_tree
    from cute_kernels.export import ExportSpec, _build_int8
    from cute_kernels.ops import split_k
    from cute_kernels.sm90.gemm import Sm90GemmKernel

    assert [split_k.cluster_rank1_share("int8", k, 2) for k in (256, 4096, 8192, 8320, 14336)] == [6, 6, 6, 7, 7]
    assert split_k.cluster_rank1_share("int8", 4096, 1) == 8 and split_k.cluster_rank1_share("fp8", 4096, 2) == 8
    cfg = TileConfig(tile_m=64, tile_n=16, cluster_m=1, swap_ab=True)
    tree = scaled_mm_tree("vector", "vector", True, swap_ab=True)
    assert Sm90GemmKernel(cfg, tree, None, split_cluster=2, rank1_share=6).rank1_share == 6
    for bad in (dict(split_cluster=2, rank1_share=0), dict(split_cluster=2, rank1_share=9),
                dict(split_cluster=1, rank1_share=6)):
        with pytest.raises(ValueError, match="rank1_share"):
            Sm90GemmKernel(cfg, tree, None, **bad)
    _, manifest = _build_int8(ExportSpec(m=32, n=4096, k=14336), "")
    assert manifest["split_cluster"] == 2 and manifest["rank1_share"] == 7


def test_split_cluster_rule(monkeypatch):
    """``ops.split_k.cluster_split``: two-slice plans of every tile (head 0) on 1x1-cluster, one-CTA-per-SM configs
    whose clusters all run at once and whose receive slots fit the byte cap; the off switch; and what the ops and
    the export CLI then run (an unsplit config with the slices in a cluster)."""
    from dataclasses import replace

    from cute_kernels.ops import split_k
    from cute_kernels.weight_only import wgmma

    cfg = TileConfig(tile_m=64, tile_n=16, cluster_m=1, swap_ab=True, split_k=8)
    assert split_k.cluster_split(cfg, None, 132) == 1
    assert split_k.cluster_split(cfg, (2, 0, 64, 0), 132) == 2
    assert split_k.cluster_split(cfg, (2, 0, 66, 0), 132) == 2  # 132 CTAs: every TPC pair
    assert split_k.cluster_split(cfg, (2, 0, 67, 0), 132) == 1  # a second wave of clusters
    assert split_k.cluster_split(cfg, (4, 0, 33, 0), 132) == 1  # 4-CTA clusters: measured slower
    assert split_k.cluster_split(cfg, (2, 0, 40, 12), 132) == 1  # a head of whole tiles: the workspace walk
    assert split_k.cluster_split(replace(cfg, cluster_n=2), (2, 0, 32, 0), 132) == 1
    assert split_k.cluster_split(replace(cfg, ctas_per_sm=2), (2, 0, 64, 0), 132) == 1
    assert split_k.cluster_split(replace(cfg, tile_n=128), (2, 0, 64, 0), 132) == 1  # a 32 KB slot
    got, split = split_k.resolve_split(select_sm90_int8(16, 4096, 4096), 16, 4096, 4096, 1, 132)
    assert split[0] == 2 and split_k.cluster_split(got, split, 132) == 2
    _, options, split = wgmma.launch_variant(4, wgmma.select_config(16, 8192, 8192), 132, 16, 8192, 8192)
    assert split is None and dict(options)["split_cluster"] == 2
    monkeypatch.setattr(split_k, "SPLIT_CLUSTER_SLICES", ())
    assert split_k.cluster_split(got, split_k.resolve_split(got, 16, 4096, 4096, 1, 132)[1], 132) == 1
    cfg2, options, split = wgmma.launch_variant(4, wgmma.select_config(16, 8192, 8192), 132, 16, 8192, 8192)
    assert split is not None and "split_cluster" not in dict(options) and cfg2.split_k == 2


# ------------------------------------------------------------------ asymmetric activations (azp_adj / azp)
def test_zero_point_tree_and_reference():
    from cute_kernels.epilogues import ZeroPointAccumulator

    tree = scaled_mm_tree("vector", "vector", True, zero_point="token")
    assert tree.operand_names == ("a_scale", "b_scale", "bias", "azp_adj", "azp")
    assert isinstance(tree.root.children[0].children[0].children[0], ZeroPointAccumulator)
    assert scaled_mm_tree("vector", "scalar", "acc", zero_point="tensor").operand_names == (
        "a_scale", "b_scale", "bias", "azp_adj")
    swapped = scaled_mm_tree("vector", "vector", True, zero_point="token", swap_ab=True)
    assert swapped.key != tree.key and swapped.operand_names == tree.operand_names
    assert ZeroPointAccumulator(swap_ab=True).key != ZeroPointAccumulator().key
    with pytest.raises(ValueError, match="zero_point must be one of"):
        scaled_mm_tree("vector", "vector", None, zero_point="row")
    # the reference is the GEMM of the dequantized activations (q - azp) * a_scale
    g = torch.Generator().manual_seed(0)
    q = torch.randint(-128, 128, (6, 64), dtype=torch.int8, generator=g)
    w = torch.randint(-128, 128, (16, 64), dtype=torch.int8, generator=g)
    azp = torch.randint(-128, 128, (6,), dtype=torch.int32, generator=g)
    sa, sb, bias = torch.rand(6, generator=g), torch.rand(16, generator=g), torch.randn(16, generator=g)
    x = (q.double() - azp.double()[:, None]) * sa.double()[:, None]
    expected = x @ (w.double() * sb.double()[:, None]).t() + bias.double()
    got = int8_scaled_mm_ref(q, w.t(), sa, sb, bias, azp_adj=w.to(torch.int32).sum(1), azp=azp)
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-9)
    # per tensor: one zero point folded into azp_adj
    got = int8_scaled_mm_ref(q, w.t(), sa, sb, None, azp_adj=7 * w.to(torch.int32).sum(1))
    expected = ((q.double() - 7) * sa.double()[:, None]) @ (w.double() * sb.double()[:, None]).t()
    assert torch.allclose(got, expected, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(azp=torch.zeros(32, dtype=torch.int32)), ValueError, "azp .per-token zero points. needs azp_adj"),
    (dict(azp_adj=torch.zeros(64)), TypeError, "azp_adj must have dtype int32; got float32"),
    (dict(azp_adj=torch.zeros(63, dtype=torch.int32)), ValueError, r"azp_adj must have shape \(64,\)"),
    (dict(azp_adj=torch.zeros(64, dtype=torch.int32), azp=torch.zeros(32, dtype=torch.int64)), TypeError,
     "azp must have dtype int32"),
    (dict(azp_adj=torch.zeros(64, dtype=torch.int32), azp=torch.zeros(31, dtype=torch.int32)), ValueError,
     r"azp must have shape \(32,\) \(one zero point per token M\)"),
    (dict(azp_adj=torch.zeros(128, dtype=torch.int32)[::2]), ValueError, "azp_adj must be contiguous"),
])
def test_zero_point_validation_messages(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        int8_scaled_mm(*_args(), **kwargs)


def test_zero_point_k_bound():
    from cute_kernels.ops.int8_scaled_mm import MAX_K_ZERO_POINT

    assert MAX_K_ZERO_POINT * 255 * 128 < 2**31 <= (MAX_K_ZERO_POINT + 1) * 255 * 128
    k = (MAX_K_ZERO_POINT // 16 + 1) * 16
    a = torch.empty(2, k, dtype=torch.int8)
    b = torch.empty(8, k, dtype=torch.int8).t()
    with pytest.raises(ValueError, match=f"K = {k} exceeds {MAX_K_ZERO_POINT} with a zero point"):
        int8_scaled_mm(a, b, torch.ones(2), torch.ones(8), azp_adj=torch.zeros(8, dtype=torch.int32))


@pytest.mark.parametrize("m,zero_point", [(1, "token"), (4096, "token"), (16, "tensor")])
def test_zero_point_variant_sass(m, zero_point):
    """Zero-point epilogues on the swapped split-K decode tile and the plain multi-wave tile: integer WGMMA, no
    spills."""
    from cute_kernels.ops.int8_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    cfg = select_sm90_int8(m, 4096, 4096)
    fn = compile_with_artifacts(lambda opts: build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg,
                                                        extra_options=opts, zero_point=zero_point))
    s = summarize_cubin(fn.artifacts.CUBIN)
    assert any(op.startswith("IGMMA") and ".S8.S8" in op for op in s.mma), dict(s.mma)
    assert s.local_memory_ops == 0
