"""Run test scenarios on W processes of a torch.distributed group, bounded in time.

``run_ranks(world, scenarios)`` starts W processes (torch.multiprocessing), each joins a gloo (CPU) or NCCL (one GPU
per rank) group and runs the named scenario functions of this module in order. A scenario raising on any rank fails
the test with that rank's traceback; a hang fails it after ``timeout_s`` (the group's own timeout fires first inside
the workers, the parent kills what is left). Inputs are drawn from a seed every rank shares, so each rank can compute
the whole float64 reference itself, with no extra communication that could hide a bug.
"""

from __future__ import annotations

import datetime
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from cute_kernels.distributed import quantized_matmul_reduce_scatter
from cute_kernels.reference import quantized_matmul_reduce_scatter_ref

EPS = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def run_ranks(world: int, scenarios: list[str], backend: str = "gloo", timeout_s: float = 60.0) -> None:
    # fork for gloo: no re-import of torch per process (~2 s each on the 2-core CI machine; torch's own distributed
    # tests fork too). spawn for NCCL: a forked child cannot use CUDA once the parent has touched it.
    start_method = "spawn" if backend == "nccl" else "fork"
    with tempfile.TemporaryDirectory() as tmp:
        context = mp.start_processes(_worker, args=(world, f"file://{tmp}/store", backend, scenarios, timeout_s),
                                     nprocs=world, join=False, start_method=start_method)
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=0.5):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{world}-rank run of {scenarios} did not finish in {timeout_s} s (a hang?)")
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()


def _worker(rank: int, world: int, init_method: str, backend: str, scenarios: list[str], timeout_s: float) -> None:
    torch.set_num_threads(1)  # W processes share 2 CI cores
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s * 0.8))
    try:
        for name in scenarios:
            globals()[name](rank, world, device)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------------------------
# inputs and the float64 reference


def make_inputs(seed: int, world: int, m: int, n: int, ks: list[int], with_bias: bool, device, column_major=False,
                bias_scale: int = 2**20):
    """Every rank's operands (identical on every process): x1 [M, K_w], x2 [K_w, N], per-rank scales, one bias."""
    g = torch.Generator().manual_seed(seed)
    ranks = []
    for w in range(world):
        x1 = torch.randint(-128, 128, (m, ks[w]), generator=g, dtype=torch.int8)
        w_nk = torch.randint(-128, 128, (n, ks[w]), generator=g, dtype=torch.int8).to(device)
        x2 = w_nk.t() if column_major else w_nk.t().contiguous()
        s1 = (torch.rand(m, generator=g) + 0.5) * 1e-3
        s2 = (torch.rand(n, generator=g) + 0.5) * 1e-2 * torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
        ranks.append((x1.to(device), x2, s1.to(device), s2.to(device)))
    bias = torch.randint(-bias_scale, bias_scale, (n,), generator=g, dtype=torch.int32).to(device) if with_bias \
        else None
    return ranks, bias


def reference(ranks, bias, bias_copies: int = 1):
    """float64 [M, N]: sum_w (x1_w @ x2_w) * s1_w * s2_w + bias_copies * bias * s1_0 * s2_0, and the magnitude sum
    sum_w |term_w| + |bias term| that bounds the rounding of any summation order."""
    terms = [(x1.double() @ x2.double()) * s1.double()[:, None] * s2.double()[None, :] for x1, x2, s1, s2 in ranks]
    if bias is not None:
        _, _, s1, s2 = ranks[0]
        terms.append(bias_copies * bias.double()[None, :] * s1.double()[:, None] * s2.double()[None, :])
    total = torch.stack(terms).sum(0)
    return total, torch.stack(terms).abs().sum(0)


def assert_matches(out, ref_rows, mag_rows, out_dtype, reduce_dtype, world, what=""):
    assert not torch.isnan(out).any(), f"{what}: NaN in output (an unwritten element)"
    err = (out.double() - ref_rows).abs()
    tol = 2 * EPS[out_dtype] * ref_rows.abs() + 2 * (world + 1) * EPS[reduce_dtype] * mag_rows + 1e-30
    worst = (err / tol).max().item() if err.numel() else 0.0
    assert worst <= 1.0, f"{what}: error {worst:.3g}x the tolerance (max abs err {err.max().item():.3g})"


def poisoned(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def _group_rows(tensor, rank, world):
    rows = tensor.shape[0] // world
    return tensor[rank * rows:(rank + 1) * rows]


def _call_and_check(rank, world, device, group=None, seed=0, m_per_rank=8, n=24, ks=None, with_bias=True,
                    chunks=None, out_dtype=torch.bfloat16, reduce_dtype=torch.float32, gemm=None,
                    column_major=False, transport="auto"):
    """One correct call on fresh inputs, checked against the reference; returns the output."""
    ks = ks or [16 + 8 * w for w in range(world)]
    ranks, bias = make_inputs(seed, world, m_per_rank * world, n, ks, with_bias, device, column_major)
    ref, mag = reference(ranks, bias)
    x1, x2, s1, s2 = ranks[rank]
    out = poisoned((m_per_rank, n), out_dtype, device)
    got = quantized_matmul_reduce_scatter(x1, x2, s1, s2, bias, group=group, out_dtype=out_dtype,
                                          reduce_dtype=reduce_dtype, chunks=chunks, out=out, gemm=gemm,
                                          transport=transport)
    assert got is out
    what = (f"rank {rank}/{world} M/W={m_per_rank} N={n} chunks={chunks} reduce={reduce_dtype} out={out_dtype} "
            f"transport={transport}")
    assert_matches(out, _group_rows(ref, rank, world), _group_rows(mag, rank, world), out_dtype, reduce_dtype,
                   world, what)
    return out


def _expect_error(kind, fragment, fn):
    try:
        fn()
    except kind as error:
        assert fragment in str(error), f"expected {fragment!r} in the error, got: {error}"
        return
    raise AssertionError(f"expected {kind.__name__} containing {fragment!r}; nothing was raised")


# ---------------------------------------------------------------------------------------------------------------
# scenarios: functions (rank, world, device) run on every rank


def decomposition(rank, world, device):
    """Every chunking, reduce dtype and output dtype gives this rank's rows of the reference."""
    cases = [
        dict(m_per_rank=12, n=40, chunks=1),
        dict(m_per_rank=12, n=40, chunks=3),
        dict(m_per_rank=13, n=40, chunks=4),  # uneven: 4 + 4 + 4 + 1 rows
        dict(m_per_rank=5, n=16, chunks=8),  # more chunks asked than rows: one row each
        dict(m_per_rank=8, n=24, chunks=None, out_dtype=torch.float16),
        dict(m_per_rank=8, n=24, chunks=2, reduce_dtype=torch.bfloat16, with_bias=False),
        dict(m_per_rank=8, n=24, chunks=3, out_dtype=torch.float16, reduce_dtype=torch.float16),
    ]
    for seed, case in enumerate(cases):
        _call_and_check(rank, world, device, seed=seed, **case)
    # With one set of scales shared by all ranks the op matches the library's float64 reference as well.
    ranks, bias = make_inputs(42, world, 8 * world, 24, [16 + 16 * w for w in range(world)], True, device)
    s1, s2 = ranks[0][2], ranks[0][3]
    ranks = [(x1, x2, s1, s2) for x1, x2, _, _ in ranks]
    expected = quantized_matmul_reduce_scatter_ref([r[0] for r in ranks], [r[1] for r in ranks], s1, s2, bias,
                                                   world)[rank]
    ref, mag = reference(ranks, bias)
    torch.testing.assert_close(expected, _group_rows(ref, rank, world), rtol=1e-12, atol=0)
    out = quantized_matmul_reduce_scatter(*ranks[rank], bias, chunks=3)
    assert_matches(out, expected, _group_rows(mag, rank, world), torch.bfloat16, torch.float32, world, "library ref")

    # Chunking changes only which rows travel together: with 2 ranks every sum is a + b in one rounding, so the
    # chunked result must be bit-identical to the sequential one.
    if world == 2:
        sequential = _call_and_check(rank, world, device, seed=99, m_per_rank=12, n=40, chunks=1)
        chunked = _call_and_check(rank, world, device, seed=99, m_per_rank=12, n=40, chunks=5)
        assert torch.equal(sequential, chunked), "chunked and sequential results differ"


def bias_once(rank, world, device):
    """The int32 bias is added once, by group rank 0, with rank 0's scales; other ranks' bias values are not read."""
    m_per_rank, n = 6, 32
    ks = [16] * world
    ranks, bias = make_inputs(7, world, m_per_rank * world, n, ks, True, device, bias_scale=2**22)
    ref, mag = reference(ranks, bias)
    wrong, _ = reference(ranks, bias, bias_copies=world)  # the seed's per-rank formula summed over ranks
    x1, x2, s1, s2 = ranks[rank]
    # Non-zero ranks pass a different bias: the rule says it is never read, so the result must not change.
    my_bias = bias if rank == 0 else bias + 12345
    out = quantized_matmul_reduce_scatter(x1, x2, s1, s2, my_bias, chunks=2)
    rows = slice(rank * m_per_rank, (rank + 1) * m_per_rank)
    assert_matches(out, ref[rows], mag[rows], torch.bfloat16, torch.float32, world, "bias once")
    # The test can tell the two rules apart: the W-times bias is far outside the tolerance.
    assert (out.double() - wrong[rows]).abs().max() > 100 * (2.0**-8 * ref[rows].abs().max())


def shapes(rank, world, device):
    """Output shape and dtype without `out=`, and the empty M = 0 case."""
    ranks, bias = make_inputs(3, world, 4 * world, 24, [16] * world, True, device)
    x1, x2, s1, s2 = ranks[rank]
    for out_dtype in (torch.bfloat16, torch.float16):
        out = quantized_matmul_reduce_scatter(x1, x2, s1, s2, bias, out_dtype=out_dtype)
        assert out.shape == (4, 24) and out.dtype == out_dtype and out.device == device
    empty = quantized_matmul_reduce_scatter(x1[:0], x2, s1[:0], s2, bias)
    assert empty.shape == (0, 24)


def errors(rank, world, device):
    """Bad or disagreeing inputs raise the same error on every rank, and the group stays usable after each."""
    from cute_kernels.distributed.rank_agreement import metadata_group

    assert metadata_group(None, device) == (dist.group.WORLD, torch.device("cpu"))  # gloo already: no mirror
    ranks, bias = make_inputs(5, world, 4 * world, 24, [16] * world, True, device)
    x1, x2, s1, s2 = ranks[rank]
    op = quantized_matmul_reduce_scatter
    last = world - 1

    def check_still_in_step():
        _call_and_check(rank, world, device, seed=11, m_per_rank=4, n=16, chunks=2)

    # M not a multiple of W: every rank sees the same M, so every rank raises.
    m_bad = 4 * world + 1
    xb = torch.ones(m_bad, 16, dtype=torch.int8)
    _expect_error(ValueError, f"must be a multiple of the group size {world}",
                  lambda: op(xb, x2, torch.ones(m_bad), s2, bias))
    check_still_in_step()

    # N differs between ranks.
    n_here = 24 if rank == 0 else 32
    _expect_error(ValueError, "N (x2.shape[1]) must be the same on every rank",
                  lambda: op(x1, x2[:, :1].expand(16, n_here).contiguous(), s1, torch.ones(n_here), None))
    check_still_in_step()

    # M differs between ranks.
    m_here = 4 * world if rank == 0 else 8 * world
    _expect_error(ValueError, "M (x1.shape[0]) must be the same on every rank",
                  lambda: op(x1[:1].expand(m_here, 16).contiguous(), x2, torch.ones(m_here), s2, None))
    check_still_in_step()

    # The bias is passed on one rank only.
    _expect_error(ValueError, "has bias must be the same on every rank",
                  lambda: op(x1, x2, s1, s2, bias if rank == 0 else None))
    check_still_in_step()

    # Ranks ask for different chunk counts (they would issue different numbers of collectives).
    _expect_error(ValueError, "chunks (0 = auto) must be the same on every rank",
                  lambda: op(x1, x2, s1, s2, bias, chunks=1 + rank))
    check_still_in_step()

    # An unknown transport, and p2p on CPU tensors: every rank raises (the last rank names the first case).
    _expect_error(ValueError, "transport must be 'auto', 'nccl' or 'p2p'",
                  lambda: op(x1, x2, s1, s2, bias, transport="nvshmem"))
    check_still_in_step()
    _expect_error(ValueError, "transport='p2p' needs CUDA tensors",
                  lambda: op(x1, x2, s1, s2, bias, transport="p2p"))
    check_still_in_step()

    # One rank passes a float x1: it raises its own TypeError, the others a TypeError naming that rank.
    bad_x1 = x1.float() if rank == last else x1
    fragment = "x1 must have dtype int8" if rank == last else f"rank {last} of the group rejected its arguments"
    _expect_error(TypeError, fragment, lambda: op(bad_x1, x2, s1, s2, bias))
    check_still_in_step()

    # One rank's K shards disagree between x1 and x2.
    bad_x2 = x2[:8] if rank == last else x2
    _expect_error(ValueError, "x2 must have shape", lambda: op(x1, bad_x2, s1, s2, bias))
    check_still_in_step()

    # Local rules, same on every rank.
    _expect_error(TypeError, "reduce_dtype must be float32 or out_dtype",
                  lambda: op(x1, x2, s1, s2, bias, out_dtype=torch.bfloat16, reduce_dtype=torch.float16))
    _expect_error(TypeError, "bias must have dtype int32", lambda: op(x1, x2, s1, s2, bias.float()))
    _expect_error(ValueError, "scale_x1 must have shape", lambda: op(x1, x2, s1[:-1], s2, bias))
    _expect_error(ValueError, "out must have shape",
                  lambda: op(x1, x2, s1, s2, bias, out=torch.empty(4, 25, dtype=torch.bfloat16)))
    _expect_error(ValueError, "chunks must be None", lambda: op(x1, x2, s1, s2, bias, chunks=0))
    _expect_error(TypeError, "scale_x1 must have dtype float32",
                  lambda: op(x1, x2, s1.double(), s2, bias, validate_across_ranks=False))
    check_still_in_step()


def subgroup(rank, world, device):
    """A group that is not the world: group ranks, not global ranks, pick the row blocks and the bias owner."""
    members = list(range(1, world))
    group = dist.new_group(members)
    if rank not in members:
        _expect_error(ValueError, "not a member of `group`",
                      lambda: quantized_matmul_reduce_scatter(*make_inputs(0, 1, 4, 8, [16], False, device)[0][0],
                                                              group=group))
        return
    _call_and_check(members.index(rank), len(members), device, group=group, seed=21, m_per_rank=6, n=24, chunks=3)


def gpu_correctness(rank, world, device):
    """The CUDA paths (NCCL pipeline and p2p pulls; the library's int8 GEMM and the torch._int_mm stand-in) against
    the float64 reference. (At these sizes transport="auto" picks the NCCL path: below P2P_MIN_OUTPUTS.)"""
    from cute_kernels.distributed import TorchIntMmChunkGemm

    ks = [256 + 128 * (w % 2) for w in range(world)]
    cases = [
        dict(chunks=1),
        dict(chunks=3),
        dict(chunks=None),
        dict(chunks=3, m_per_rank=320),  # last chunk 64 rows: a partial GEMM tile
        dict(chunks=3, with_bias=False),
        dict(chunks=2, reduce_dtype=torch.bfloat16),
        dict(chunks=2, out_dtype=torch.float16),
        dict(chunks=3, gemm=TorchIntMmChunkGemm()),
        dict(chunks=3, m_per_rank=264, gemm=TorchIntMmChunkGemm()),  # last chunk 8 rows: padded for cuBLASLt
        dict(transport="p2p"),  # copy-engine pulls over symmetric memory (p2p_transport.py)
        dict(transport="p2p", reduce_dtype=torch.bfloat16, m_per_rank=200),  # a partial GEMM tile, reduce in bf16
        dict(transport="p2p", out_dtype=torch.float16, with_bias=False),
        dict(transport="p2p", gemm=TorchIntMmChunkGemm()),
        dict(transport="p2p", m_per_rank=1024, with_bias=False),  # two row parts, the sum fused into the epilogue
        dict(transport="p2p", m_per_rank=1024),  # two parts; the bias rank (0) sums unfused, rank 1 fused
    ]
    for seed, case in enumerate(cases):
        case = {"m_per_rank": 384, "n": 512, **case}
        _call_and_check(rank, world, device, seed=seed, ks=ks, column_major=True, **case)
    # The push schedule (peer blocks stored straight into the peers' symmetric buffers): fused sum (no bias), the
    # bias rank's sum pass, a bf16 reduction with a partial tile, the torch._int_mm GEMM.
    from cute_kernels.distributed import p2p_transport

    push_cases = [dict(with_bias=False), dict(), dict(reduce_dtype=torch.bfloat16, m_per_rank=200),
                  dict(gemm=TorchIntMmChunkGemm())]
    p2p_transport.MODE = "push"
    try:
        for seed, case in enumerate(push_cases):
            case = {"m_per_rank": 384, "n": 512, **case}
            _call_and_check(rank, world, device, seed=100 + seed, ks=ks, column_major=True, transport="p2p", **case)
    finally:
        p2p_transport.MODE = "pull"
    _expect_error(ValueError, "x2 must be column-major",
                  lambda: _call_and_check(rank, world, device, m_per_rank=128, n=512, ks=ks, column_major=False))


def gpu_graph_replay(rank, world, device):
    """The p2p op captured in a CUDA graph on every rank, replayed back to back on new operands copied into the
    captured tensors (no host sync between replays): each replay matches the float64 reference. A replay reuses the
    half of the symmetric buffer it captured, so this is what the captured call's leading barrier protects."""
    from cute_kernels.distributed import p2p_transport

    ks = [256 + 128 * (w % 2) for w in range(world)]
    cases = [dict(reduce_dtype=torch.bfloat16, m_per_rank=384, with_bias=True),
             # a larger problem on the same capture stream: its kept buffers grow inside the capture
             dict(reduce_dtype=torch.bfloat16, m_per_rank=768, with_bias=False),
             dict(reduce_dtype=torch.float32, m_per_rank=1024, with_bias=False),  # two parts, fused sum
             dict(reduce_dtype=torch.float32, m_per_rank=1024, with_bias=True, validate=True),  # bias in the fused sum;
             # validate: the default cross-rank check, over the gloo mirror group, captured with the op
             dict(reduce_dtype=torch.float32, m_per_rank=256, with_bias=False, mode="push")]
    for i, case in enumerate(cases):
        m_per_rank, reduce_dtype = case["m_per_rank"], case["reduce_dtype"]
        p2p_transport.MODE = case.get("mode", "pull")
        try:
            def inputs(seed):
                return make_inputs(seed, world, m_per_rank * world, 512, ks, case["with_bias"], device, True)

            ranks, bias = inputs(1000 + 10 * i)
            x1, x2, s1, s2 = (t.clone() for t in ranks[rank])  # x2 clone keeps the column-major strides
            bias = None if bias is None else bias.clone()
            out = poisoned((m_per_rank, 512), torch.bfloat16, device)

            def call():
                quantized_matmul_reduce_scatter(x1, x2, s1, s2, bias, out=out, reduce_dtype=reduce_dtype,
                                                transport="p2p", validate_across_ranks=case.get("validate", False))

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                call()
                call()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                call()
            expected, results = [], []
            for replay in range(4):
                new_ranks, new_bias = inputs(1001 + 10 * i + replay)
                for dst, src in zip((x1, x2, s1, s2), new_ranks[rank]):
                    dst.copy_(src)
                if bias is not None:
                    bias.copy_(new_bias)
                out.fill_(float("nan"))
                graph.replay()
                results.append(out.clone())
                expected.append(reference(new_ranks, new_bias))
            torch.cuda.synchronize()
            for replay, (got, (ref, mag)) in enumerate(zip(results, expected)):
                assert_matches(got, _group_rows(ref, rank, world), _group_rows(mag, rank, world), torch.bfloat16,
                               reduce_dtype, world, f"rank {rank} graph replay {replay} of case {case}")
        finally:
            p2p_transport.MODE = "pull"


def gpu_errors(rank, world, device):
    """On an NCCL group (the cross-rank check's all-gather on the device; its gloo mirror, used while capturing, is
    made once): a rank's disagreeing N or rejected dtype raises on every rank, and the group stays in step for
    correct calls after, on both transports."""
    from cute_kernels.distributed.rank_agreement import metadata_group

    mirror, meta_device = metadata_group(None, device)
    assert "gloo" in str(dist.get_backend(mirror)) and meta_device.type == "cpu"
    assert metadata_group(None, device)[0] is mirror  # made once per group
    ks = [256] * world
    ranks, bias = make_inputs(7, world, 128 * world, 512, ks, True, device, column_major=True)
    x1, x2, s1, s2 = ranks[rank]
    op = quantized_matmul_reduce_scatter
    last = world - 1
    narrow = rank == last
    _expect_error(ValueError, "N (x2.shape[1]) must be the same on every rank",
                  lambda: op(x1, x2[:, :256] if narrow else x2, s1, s2[:256] if narrow else s2,
                             bias[:256] if narrow else bias))
    fragment = "x1 must have dtype int8" if rank == last else f"rank {last} of the group rejected its arguments"
    _expect_error(TypeError, fragment, lambda: op(x1.float() if rank == last else x1, x2, s1, s2, bias))
    for transport in ("nccl", "p2p"):
        _call_and_check(rank, world, device, seed=31, ks=ks, column_major=True, m_per_rank=256, n=512,
                        transport=transport)


def gpu_plan_growth(rank, world, device):
    """p2p call plans across problems that grow the shared scratch buffers (sizes up and down, both reduce dtypes,
    fused and unfused sums): every call matches the reference, and every plan kept for this stream is built on the
    buffers the scratch holds now (a plan on a replaced buffer would keep that buffer alive)."""
    from cute_kernels.distributed import p2p_transport, scratch
    from cute_kernels.streams import current_stream_id

    ks = [256] * world
    for m_per_rank in (128, 384, 128, 1024, 384, 1024):
        for reduce_dtype in (torch.bfloat16, torch.float32):
            _call_and_check(rank, world, device, seed=m_per_rank, ks=ks, column_major=True, m_per_rank=m_per_rank,
                            n=512, reduce_dtype=reduce_dtype, transport="p2p", with_bias=False)
    stream = current_stream_id(device)
    plans = [(key, plan) for sym in p2p_transport._symmetric.values() for key, plan in sym.plans.items()
             if key[0] == stream]
    assert plans
    for key, plan in plans:
        recv, own = scratch.current(device, key[3], "p2p_recv"), scratch.current(device, key[3], "p2p_own")
        assert plan.buffers[0] == recv.data_ptr(), f"plan {key} holds a replaced receive buffer"
        assert plan.buffers[1] is None or plan.buffers[1] == own.data_ptr(), f"plan {key} holds a replaced own buffer"
