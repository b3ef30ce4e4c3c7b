"""quantized_matmul_reduce_scatter: chunk plans (in process), gloo runs on 2, 3 and 4 CPU processes, NCCL on GPUs.

The multi-process runs go through tests/distributed_harness.py: one spawn per world size runs all scenarios, so the
cost of starting W Python processes is paid once; each run is bounded by a timeout, so a desync fails instead of
hanging CI.
"""

import pytest
import torch

from cute_kernels.distributed import (
    Int8ScaledMmChunkGemm,
    ReferenceChunkGemm,
    TorchIntMmChunkGemm,
    auto_num_chunks,
    plan_chunks,
)
from cute_kernels.distributed.chunk_gemm import run_block
from cute_kernels.reference import int8_scaled_mm_ref

from .distributed_harness import run_ranks

CPU_SCENARIOS = ["decomposition", "bias_once", "shapes", "errors"]


def _covers(plan, rows):
    flat = [r for start, stop in plan.bounds for r in range(start, stop)]
    return flat == list(range(rows))


@pytest.mark.parametrize("rows, chunks, align", [(4096, 8, 128), (1000, 3, 128), (13, 4, 1), (5, 8, 1), (300, 2, 128)])
def test_plan_chunks_covers_rows_in_aligned_steps(rows, chunks, align):
    plan = plan_chunks(rows, chunks, align)
    assert _covers(plan, rows)
    assert plan.num_chunks <= chunks
    assert all(start % align == 0 for start, _ in plan.bounds)
    lengths = [stop - start for start, stop in plan.bounds]
    assert len(set(lengths[:-1])) <= 1 and lengths[-1] <= lengths[0]


def test_plan_chunks_rejects_zero_chunks():
    with pytest.raises(ValueError, match="chunks must be >= 1"):
        plan_chunks(16, 0)


def test_auto_chunks_crossover_and_cap():
    # W = 2, N = 8192: chunks of >= 1024 rows per rank (512 output tiles of 128 x 256), at most 2 (the measured
    # crossover: sequential below M = 4096).
    assert [auto_num_chunks(m // 2, 8192, 2, 128) for m in (512, 1024, 2048, 4096, 8192, 65536)] == [1, 1, 1, 2, 2, 2]
    # A narrower N needs taller chunks to fill the GPU: N = 1024 stays sequential up to M = 32768 on 2 ranks.
    assert auto_num_chunks(16384, 1024, 2, 128) == 2 and auto_num_chunks(8192, 1024, 2, 128) == 1


def test_eager_p2p_threshold_grows_with_world_size():
    # W = 2 (session 9's host path) takes p2p from M = 64 at N = 8192, W = 3-4 from M = 256 (measured at W = 4 in
    # session 10); W = 8 measured the old p2p path host-bound below M = 8192: above W = 4 it scales with W / 2.
    from cute_kernels.distributed.matmul_reduce_scatter import P2P_MIN_OUTPUTS, p2p_min_outputs

    assert p2p_min_outputs(2) == P2P_MIN_OUTPUTS == 64 * 8192
    assert p2p_min_outputs(3) == p2p_min_outputs(4) == 256 * 8192
    assert p2p_min_outputs(8) == 8192 * 8192 == 2 * p2p_min_outputs(5)
    assert all(p2p_min_outputs(w) <= p2p_min_outputs(w + 1) for w in range(1, 16))


def test_p2p_row_parts():
    """Two 128-aligned row parts (and the fused sum) only for fp32 partials at W = 2 with >= 1024 rows per rank."""
    from cute_kernels.distributed.p2p_transport import plan_parts

    assert plan_parts(1024, 2, torch.float32) == [(0, 512), (512, 1024)]
    assert plan_parts(1500, 2, torch.float32) == [(0, 768), (768, 1500)]
    assert plan_parts(4096, 2, torch.float32) == [(0, 2048), (2048, 4096)]
    assert plan_parts(1000, 2, torch.float32) == [(0, 1000)]
    assert plan_parts(4096, 2, torch.bfloat16) == [(0, 4096)]
    assert plan_parts(4096, 4, torch.float32) == [(0, 4096)]


def _chunk_operands(seed, blocks=2, rows=20, k=48, n=24):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (blocks, rows, k), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8).t()
    a_scale = torch.rand(blocks, rows, generator=g) + 0.5
    b_scale = torch.rand(n, generator=g) - 0.5
    bias = torch.randint(-2**20, 2**20, (n,), generator=g, dtype=torch.int32)
    return a, b, a_scale, b_scale, bias


def _fake_int8_scaled_mm(a, b, a_scale, b_scale, bias=None, out_dtype=torch.bfloat16, out=None, c=None):
    """int8_scaled_mm's contract (2-D form; an int32 bias enters before the scales) by the library reference, on CPU."""
    assert a.dim() == 2 and out.dtype == out_dtype and out.is_contiguous()
    assert bias is None or bias.dtype == torch.int32  # the adapter hands the op's int32 bias through
    ref = int8_scaled_mm_ref(a, b, a_scale, b_scale, bias)
    out.copy_(ref if c is None else ref + c.double())
    return out


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("make_gemm", [lambda: Int8ScaledMmChunkGemm(mm=_fake_int8_scaled_mm), TorchIntMmChunkGemm],
                         ids=["int8_scaled_mm_adapter", "torch_int_mm"])
@pytest.mark.parametrize("rows", [20, 8])  # 8 rows: the short-chunk padding of the torch._int_mm path
def test_gpu_chunk_gemms_follow_the_contract(make_gemm, with_bias, rows):
    # The GPU GEMM adapters' own logic (per-block launches, the rank-0 int32 bias handed to the kernel / added to
    # torch._int_mm's int32 result) runs on CPU tensors here; only the kernels they call differ on the GPU.
    a, b, a_scale, b_scale, bias = _chunk_operands(rows, rows=rows)
    bias = bias if with_bias else None
    want = torch.full((2, rows, 24), float("nan"))
    ReferenceChunkGemm()(a, b, a_scale, b_scale, bias, want)
    got = torch.full((2, rows, 24), float("nan"))
    make_gemm()(a, b, a_scale, b_scale, bias, got)
    # fp32 rounding of acc * s1 * s2 and of bias * s1 * s2 before they are added: relative to their magnitudes,
    # not to the (possibly cancelling) sum.
    scale = a_scale.double()[..., None] * b_scale.double()
    magnitude = (a.double() @ b.double()).abs() * scale.abs()
    if bias is not None:
        magnitude += bias.double().abs() * scale.abs()
    assert not torch.isnan(got).any()
    assert ((got.double() - want.double()).abs() <= 4 * 2.0**-24 * magnitude).all()
    # One block as 2-D operands (the p2p transport's call): the same arithmetic as that block of the batched call.
    one = torch.full((rows, 24), float("nan"))
    run_block(make_gemm(), a[1], b, a_scale[1], b_scale, bias, one)
    assert torch.equal(one, got[1])


def test_gloo_2_ranks():
    run_ranks(2, CPU_SCENARIOS)


def test_gloo_3_ranks():
    run_ranks(3, CPU_SCENARIOS)


def test_gloo_4_ranks_and_subgroup():
    run_ranks(4, ["decomposition", "bias_once", "errors", "subgroup"])


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more CUDA GPUs")
def test_nccl_matches_reference():
    run_ranks(torch.cuda.device_count(), ["gpu_correctness", "gpu_errors"], backend="nccl", timeout_s=300)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 or more CUDA GPUs")
def test_nccl_p2p_graph_replays_match_reference():
    run_ranks(torch.cuda.device_count(), ["gpu_graph_replay", "gpu_plan_growth"], backend="nccl", timeout_s=300)
