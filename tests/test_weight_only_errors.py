"""CPU tier: bad arguments to quantized_mm / awq_gemm / awq_linear / awq_dequantize get an error naming them."""

import pytest
import torch

from cute_kernels.formats.awq import awq_dequantize_reference, awq_quantize
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.weight_only import awq_dequantize, awq_gemm, awq_linear, quantized_mm


@pytest.fixture
def int4_case():
    w_packed, scale, _ = quantize_weights(torch.randn(16, 64), 4)
    return torch.randn(2, 64, dtype=torch.bfloat16), w_packed, scale


@pytest.mark.parametrize("bits", [0, 3, 16, "4", True])
def test_bits_must_be_a_supported_width(int4_case, bits):
    x, w, s = int4_case
    with pytest.raises(ValueError, match="bits"):
        quantized_mm(x, w, s, bits)


def test_packed_width_must_match_k(int4_case):
    x, w, s = int4_case
    with pytest.raises(ValueError, match=r"w_packed must have shape \[N, K \* bits / 8\]"):
        quantized_mm(x, w[:, :16], s, 4)
    with pytest.raises(ValueError, match=r"w_packed must have shape"):
        quantized_mm(x, w, s, 8)


def test_k_must_be_a_multiple_of_values_per_byte():
    x = torch.randn(1, 6, dtype=torch.float16)
    with pytest.raises(ValueError, match="multiple of 8 / bits = 4"):
        quantized_mm(x, torch.zeros(4, 1, dtype=torch.uint8), 1.0, 2)


def test_group_scales_shape_and_group(int4_case):
    x, w, s = int4_case
    with pytest.raises(ValueError, match="group_scales must have shape"):
        quantized_mm(x, w, s, 4, group_scales=torch.ones(16, 3))  # group 64/3
    with pytest.raises(ValueError, match="group_scales must have shape"):
        quantized_mm(x, w, s, 4, group_scales=torch.ones(16, 4))  # group 16 < 32
    with pytest.raises(ValueError, match="group_scales must have shape"):
        quantized_mm(x, w, s, 4, group_scales=torch.ones(8, 2))  # wrong N
    with pytest.raises(TypeError, match="group_scales must have dtype"):
        quantized_mm(x, w, s, 4, group_scales=torch.ones(16, 2, dtype=torch.float64))


def test_dtypes(int4_case):
    x, w, s = int4_case
    with pytest.raises(TypeError, match="x must have dtype"):
        quantized_mm(x.to(torch.float64), w, s, 4)
    with pytest.raises(TypeError, match="w_packed must have dtype uint8"):
        quantized_mm(x, w.to(torch.int8), s, 4)
    with pytest.raises(TypeError, match="out_dtype"):
        quantized_mm(x, w, s, 4, out_dtype=torch.int32)
    with pytest.raises(TypeError, match="scale must be a Python float"):
        quantized_mm(x, w, "1.0", 4)


def test_cpu_tensors_are_refused(int4_case):
    x, w, s = int4_case
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        quantized_mm(x, w, s, 4)


@pytest.fixture
def awq_case():
    qweight, qzeros, scales = awq_quantize(torch.randn(128, 64), 32)
    return torch.randn(3, 128, dtype=torch.float16), qweight, scales, qzeros


def test_awq_packed_dtypes(awq_case):
    x, qw, s, qz = awq_case
    with pytest.raises(TypeError, match="qweight must be an int32 tensor"):
        awq_gemm(x, qw.to(torch.int64), s, qz)
    with pytest.raises(TypeError, match="qzeros must be an int32 tensor"):
        awq_gemm(x, qw, s, qz.to(torch.uint8))
    with pytest.raises(TypeError, match="scales must have x's dtype"):
        awq_gemm(x, qw, s.to(torch.bfloat16), qz)
    with pytest.raises(TypeError, match="x must have dtype"):
        awq_gemm(x.float(), qw, s.float().half(), qz)


def test_awq_shapes(awq_case):
    x, qw, s, qz = awq_case
    with pytest.raises(ValueError, match="x must be"):
        awq_gemm(x[:, :64], qw, s, qz)
    with pytest.raises(ValueError, match="scales must have shape"):
        awq_gemm(x, qw, s[:, :32], qz)
    with pytest.raises(ValueError, match="qzeros must have shape"):
        awq_gemm(x, qw, s, qz[:2])
    with pytest.raises(ValueError, match="must divide IC"):
        awq_gemm(x, qw, s[:3], qz[:3])


def test_awq_non_contiguous_packed(awq_case):
    x, qw, s, qz = awq_case
    wide = torch.zeros(128, 16, dtype=torch.int32)
    wide[:, ::2] = qw
    with pytest.raises(ValueError, match="qweight must be contiguous"):
        awq_gemm(x, wide[:, ::2], s, qz)


def test_awq_cpu_tensors_are_refused(awq_case):
    x, qw, s, qz = awq_case
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        awq_gemm(x, qw, s, qz)
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        awq_linear(x.reshape(1, 3, 128), qw, s, qz)
    with pytest.raises(ValueError, match="split_k_iters"):
        awq_gemm(x, qw, s, qz, split_k_iters=0)


def test_awq_dequantize_cpu_is_the_reference(awq_case):
    _, qw, s, qz = awq_case
    assert torch.equal(awq_dequantize(qw, s, qz), awq_dequantize_reference(qw, s, qz))


def test_forced_tiles_that_cannot_launch_are_named():
    """A caller-forced ``tile=`` is checked before the launch (quantized_mm / awq_gemm call TileShape.validate)."""
    from cute_kernels.weight_only import config
    from cute_kernels.weight_only.kernel import TileShape

    ok = config.decode_tile(4, 16, 28672, 132, scaled=True, k=4096)
    assert ok.validate() is ok
    for bad, match in ((TileShape(nt=8, mt=2, warps_n=1, warps_k=8, stages=3), "exceed the 232448 bytes"),
                       (TileShape(nt=0, mt=1, warps_n=1, warps_k=8), "nt must be >= 1"),
                       (TileShape(nt=1, mt=1, warps_n=8, warps_k=8), "1024"),
                       (TileShape(nt=1, mt=1, warps_n=1, warps_k=8, stages=1), "stages must be 0"),
                       (TileShape(nt=1, mt=1, warps_n=1, warps_k=8, acc_chains=0), "acc_chains must be >= 1"),
                       (TileShape(nt=4, mt=2, warps_n=1, warps_k=8, stages=3, max_ctas_per_sm=2), "already exceeds")):
        with pytest.raises(ValueError, match=match):
            bad.validate()


def test_clear_weight_caches_forgets_every_derived_layout():
    """``clear_weight_caches`` empties each cache of weight-derived layouts and the plans that point at them (the GPU
    tier checks the effect: test_fuzz_gpu.py::test_weights_rewritten_in_place)."""
    import cute_kernels
    from cute_kernels.weight_only import awq, awq_repack, wgmma
    from cute_kernels.weight_only.quantized_mm import _plans as quantized_mm_plans

    stores = (awq_repack._cache, wgmma._blobs, wgmma._params, awq._plans, quantized_mm_plans)
    for i, store in enumerate(stores):
        store[("stale", i)] = object()
    cute_kernels.clear_weight_caches()
    assert all(("stale", i) not in store for i, store in enumerate(stores))
