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
    (lambda a, b, sa, sb: (a, b.to(torch.float8_e5m2), sa, sb, {}), "b"),
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
    for m in (1, 64, 65, 300, 8192):
        cfg = select_config(m, 7168, 2048)
        assert cfg.tile_n <= 192 and not cfg.swap_ab and (m > 64 or cfg.tile_m == 64)
        assert cfg in shipped_configs() or replace(cfg, split_k=1) in shipped_configs()


@pytest.mark.parametrize("m,n,k,tile_n", [
    (64, 24576, 1536, 192),   # 192 tiles of 128 columns = two waves on 132 SMs; 128 tiles of 192 = one
    (1024, 2112, 7168, 160),  # 8 x 17 = 136 tiles of 128 (two waves) vs 8 x 14 = 112 of 160
    (4096, 4096, 7168, 128),  # 1024 tiles of 128 = 7.8 waves; wider tiles leave more of their last wave idle
    (128, 7168, 16384, 128),  # split-K evens the waves out at 128
])
def test_tile_width_follows_the_wave_model(m, n, k, tile_n):
    assert select_config(m, n, k, 1, 132).tile_n == tile_n


@pytest.mark.parametrize("rank,out_dtype,gran,cfg", [
    (2, torch.bfloat16, (1, 128, 128), shipped_configs()[-1]),
    (3, torch.float16, (128, 128, 128), shipped_configs()[0]),
    (2, torch.bfloat16, (128, 128, 128), shipped_configs()[1]),
    (2, torch.bfloat16, (1, 128, 128), TileConfig(tile_m=128, tile_n=192, cluster_m=2)),
    (2, torch.float16, (128, 128, 128), TileConfig(tile_m=64, tile_n=160, split_k=8)),
], ids=["groupwise-bf16-128x128c2", "blockwise-fp16-batched-64x128-split", "blockwise-bf16-128x128-split",
        "groupwise-bf16-128x192c2", "blockwise-fp16-64x160-split"])
def test_sm90_compiles_to_qgmma_without_spills(rank, out_dtype, gran, cfg, tmp_path):
    from cute_kernels.sass import summarize_cubin

    fn = build_sm90(rank, out_dtype, gran, cfg, 132, f"--keep-cubin --dump-dir {tmp_path}")
    s = summarize_cubin(fn.artifacts.CUBIN)
    qgmma = [op for op in s.mma if op.startswith("QGMMA.") and "E4M3.E4M3" in op and ".F32." in op]
    assert qgmma, f"no FP8 WGMMA in SASS: {dict(s.mma)}"
    assert sum(s.mma[op] for op in qgmma) >= 4  # one per k-block of a K-tile
    assert not s.spills, f"{s.local_memory_ops} local-memory ops (spills)"
    if cfg.tile_m == 64 and cfg.tile_n <= 128:
        # k_pair: the first K-tile's group is waited for while the second one's is still in flight
        assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in s.text


def test_rejects_tiles_wider_than_granule():
    from cute_kernels.epilogues import Accumulator, EpilogueTree
    from cute_kernels.sm90.fp8_blockwise import Fp8BlockwiseGemmSm90

    with pytest.raises(ValueError, match="tile_n"):
        Fp8BlockwiseGemmSm90(TileConfig(tile_m=128, tile_n=256), EpilogueTree(Accumulator()), (1, 128, 128))


def test_alternating_warpgroups_option_compiles(monkeypatch):
    # Off by default (measured slower, see fp8_blockwise.ALTERNATE_WARPGROUPS); kept compiling so it can be re-measured.
    import cute_kernels.sm90.fp8_blockwise as fb
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    monkeypatch.setattr(fb, "ALTERNATE_WARPGROUPS", True)
    cfg = TileConfig(tile_m=128, tile_n=128, cluster_m=2)
    s = summarize_cubin(compile_with_artifacts(
        lambda o: build_sm90(2, torch.bfloat16, (1, 128, 128), cfg, 132, o)).artifacts.CUBIN)
    assert "BAR.ARV" in s.text and not s.spills


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
