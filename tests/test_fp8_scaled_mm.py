"""CPU tier of fp8_scaled_mm (FP8 operands on int8_scaled_mm's SM90 kernel, an fp32 accumulator): the reference, the
validation messages, SASS of the shipped configs on e4m3 / e5m2 operands (FP8 WGMMA, no spills), the torch op's fake
implementation and the CLI export."""

import pytest
import torch

from cute_kernels import fp8_scaled_mm
from cute_kernels.configs import TileConfig, select_sm90_int8, shipped_sm90_int8_configs
from cute_kernels.reference import int8_scaled_mm_ref

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _args(m=32, n=64, k=128, dtype=E4M3):
    a = (torch.randn(m, k) * 4).to(dtype)
    b = (torch.randn(n, k) * 4).to(dtype).t()
    return a, b, torch.rand(m), torch.rand(n), torch.randn(n).bfloat16()


def test_reference_is_the_fp8_values_product():
    """int8_scaled_mm_ref serves FP8 too: the e4m3 values are exact in float64."""
    a, b, sa, sb, bias = _args(3, 8, 32)
    want = (a.double() @ b.double()) * sa.double()[:, None] * sb.double()[None, :] + bias.double()
    assert torch.equal(int8_scaled_mm_ref(a, b, sa, sb, bias), want)


@pytest.mark.parametrize("mutate,exc,match", [
    (lambda a, b, sa, sb, bias: (a.to(torch.int8), b, sa, sb, bias), TypeError,
     "a must have dtype float8_e4m3fn, float8_e5m2; got int8"),
    (lambda a, b, sa, sb, bias: (a, b.float(), sa, sb, bias), TypeError, "b must have dtype float8_e4m3fn"),
    (lambda a, b, sa, sb, bias: (a, b, sa, sb, bias.int()), TypeError, "bias must have dtype bfloat16; got int32"),
    (lambda a, b, sa, sb, bias: (a[:, :120], b[:120], sa, sb, bias), ValueError, "K = 120 must be a positive multiple"),
    (lambda a, b, sa, sb, bias: (a, b.t().contiguous().t().contiguous(), sa, sb, bias), ValueError,
     "b must be column-major"),
    (lambda a, b, sa, sb, bias: (a, b, sa[:5], sb, bias), ValueError, r"a_scale must have shape \[32\] or \[1\]"),
    (lambda a, b, sa, sb, bias: (a, b, sa, sb, bias), ValueError, "a must be a CUDA tensor"),
])
def test_validation_messages(mutate, exc, match):
    with pytest.raises(exc, match=match):
        fp8_scaled_mm(*mutate(*_args()))


def test_e5m2_and_mixed_pairs_validate_to_the_device_check():
    a, b, sa, sb, bias = _args()
    for a_, b_ in ((a.to(E5M2), b), (a, b.to(E5M2)), (a.to(E5M2), b.to(E5M2))):
        with pytest.raises(ValueError, match="a must be a CUDA tensor"):
            fp8_scaled_mm(a_, b_, sa, sb, bias)


_CONFIGS = [select_sm90_int8(m, 4096, 4096) for m in (1, 16, 128, 256, 4096)] + list(shipped_sm90_int8_configs())[6:9]


@pytest.mark.parametrize("cfg", _CONFIGS, ids=lambda c: c.describe().replace(" ", "_"))
@pytest.mark.parametrize("pair", [(E4M3, E4M3), (E5M2, E4M3)], ids=["e4m3", "e5m2xe4m3"])
def test_sass_fp8_wgmma_no_spills(cfg, pair):
    from cute_kernels.ops.int8_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    fn = compile_with_artifacts(lambda o: build_sm90(2, "vector", "vector", True, torch.bfloat16, cfg,
                                                     extra_options=o, weight_preload=4, operand_dtypes=pair))
    s = summarize_cubin(fn.artifacts.CUBIN)
    kernel_a, kernel_b = (pair[1], pair[0]) if cfg.swap_ab else pair  # a swapped tile's A is the weight
    want = f"F32.{'E5M2' if kernel_a == E5M2 else 'E4M3'}.{'E5M2' if kernel_b == E5M2 else 'E4M3'}"
    qgmma = [op for op in s.mma if op.startswith("QGMMA")]
    assert qgmma and all(want in op and f"x{cfg.tile_n}x32" in op for op in qgmma), dict(s.mma)
    assert s.local_memory_ops == 0
    assert s.text.count("WARPGROUP.DEPBAR") < sum(s.mma.values()) // 2  # WGMMAs not serialized


def test_torch_op_fake_and_schema():
    ops = torch.ops.cute_kernels
    a = torch.empty(5, 64, dtype=E4M3, device="meta")
    b = torch.empty(32, 64, dtype=E4M3, device="meta").t()
    out = ops.fp8_scaled_mm(a, b, torch.empty(5, device="meta"), torch.empty(32, device="meta"), None, torch.float16)
    assert out.shape == (5, 32) and out.dtype == torch.float16
    with pytest.raises(TypeError, match="a must have dtype float8_e4m3fn"):
        ops.fp8_scaled_mm(a.to(torch.int8), b, torch.empty(5, device="meta"), torch.empty(32, device="meta"))


@pytest.mark.parametrize("rank,cfg,bias", [
    (2, TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1, split_tail=4), True),
    (3, TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8), False),
    (2, TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1), True),
    (2, TileConfig(tile_m=128, tile_n=192, cluster_m=2, cluster_n=1, split_tail=4), True),
], ids=["large_m_bias", "swapped_split_batched", "k_pair_bias", "wide_bias"])
def test_promoted_variants_compile_to_qgmma_without_spills(rank, cfg, bias):
    """use_fast_accum=False: fp8_blockwise_scaled_mm's kernel with the per-token / per-channel scales in its
    epilogue (``rowwise_scales``)."""
    from cute_kernels.ops.fp8_blockwise_scaled_mm import build_sm90
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    s = summarize_cubin(compile_with_artifacts(
        lambda o: build_sm90(rank, torch.bfloat16, (128, 128, 128), cfg, 132, extra_options=o, has_bias=bias,
                             rowwise_scales=True)).artifacts.CUBIN)
    assert s.instructions["QGMMA"] > 0 and not s.spills and s.local_memory_ops == 0


def test_promoted_refuses_the_fast_path_knobs():
    a, b, sa, sb, bias = _args()
    for kwargs in ({"config": select_sm90_int8(32, 32, 128)}, {"sm_count": 66}, {"c": torch.zeros(32, 32)}):
        with pytest.raises(ValueError, match="not supported with use_fast_accum=False"):
            fp8_scaled_mm(a, b, sa, sb, bias, use_fast_accum=False, **kwargs)
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):
        fp8_scaled_mm(a, b, sa, sb, bias, use_fast_accum=False)
