"""GPU tier of fp8_blockwise_grouped_mm_contiguous (MoE experts in DeepGEMM's contiguous layout): every expert's rows
against the float64 reference and bit for bit against fp8_blockwise_scaled_mm on the same tile config; padding
blocks; malformed m_indices come out NaN; a CUDA graph replays with new routing; the torch op; argument errors."""

import pytest
import torch

from cute_kernels import fp8_blockwise_grouped_mm_contiguous as contiguous
from cute_kernels import fp8_blockwise_scaled_mm
from cute_kernels.configs import TileConfig
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_tma_aligned_mn_major
from cute_kernels.ops.fp8_blockwise_grouped_mm import CONTIGUOUS_ALIGN, contiguous_config
from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

pytestmark = pytest.mark.gpu

GROUPWISE, BLOCKWISE = (1, 128, 128), (128, 128, 128)


def _layout(counts, pad_blocks=0):
    """m_indices of experts with ``counts`` tokens, each run padded to CONTIGUOUS_ALIGN rows with -1, then
    ``pad_blocks`` whole blocks of -1 (a buffer sized for more tokens)."""
    ids = []
    for e, c in enumerate(counts):
        run = -(-c // CONTIGUOUS_ALIGN) * CONTIGUOUS_ALIGN
        ids += [e] * c + [-1] * (run - c)
    ids += [-1] * (pad_blocks * CONTIGUOUS_ALIGN)
    return torch.tensor(ids, dtype=torch.int32, device="cuda")


def _operands(m, g, n, k, gran=GROUPWISE, seed=0, tma_aligned=True):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=gen) * 3
    w = torch.randn(g, n, k, device="cuda", generator=gen) * torch.exp2(
        torch.randint(-4, 2, (g, n, 1), device="cuda", generator=gen).float())  # experts of other magnitudes
    a, a_s = quantize_fp8_per_token_group(x, 128) if gran[0] == 1 else quantize_fp8_blockwise(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    if tma_aligned and gran[0] == 1:
        a_s = to_tma_aligned_mn_major(a_s)
    return a, b, a_s, b_s


def _check_rows(out, a, b, a_s, b_s, ids, gran=GROUPWISE):
    for e in range(b.shape[0]):
        rows = (ids == e).nonzero().flatten()
        if rows.numel() == 0:
            continue
        want = fp8_blockwise_scaled_mm_ref(a, b[e], a_s, b_s[e], gran)[rows]
        got = out[rows].double()
        assert not got.isnan().any(), f"expert {e}: rows left unwritten or flagged"
        rel = ((got - want).norm() / want.norm()).item()
        assert rel <= 1e-2, f"expert {e} ({rows.numel()} rows): relative error {rel:.3g}"


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("counts,n,k,pad_blocks", [
    ([300, 0, 1, 128, 77], 512, 1024, 0),  # ragged runs, an expert with no tokens, one with a single token
    ([1000, 1000, 1000, 1000], 2112, 1024, 0),  # N not a multiple of 128
    ([5, 260], 4096, 512, 2),  # whole padding blocks at the end (a buffer sized for more tokens)
    ([17] * 16, 256, 2048, 1),  # many short experts
])
def test_rows_against_reference(counts, n, k, pad_blocks, out_dtype):
    ids = _layout(counts, pad_blocks)
    a, b, a_s, b_s = _operands(ids.numel(), len(counts), n, k, seed=len(counts) * n + k)
    out = torch.full((ids.numel(), n), float("nan"), device="cuda", dtype=out_dtype)
    contiguous(a, b, a_s, b_s, ids, out_dtype=out_dtype, out=out)
    _check_rows(out, a, b, a_s, b_s, ids)
    assert not out[ids < 0].isnan().any()  # padding rows: unspecified, but written and finite for finite inputs


@pytest.mark.parametrize("cfg", [None, TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1),
                                 TileConfig(tile_m=128, tile_n=192, cluster_m=1, cluster_n=1)])
def test_bit_equal_to_the_plain_op_per_expert(cfg):
    """Each expert's padded run through fp8_blockwise_scaled_mm on the same tile config gives the same bits: the
    tiles meet the same rows and K-tiles in the same order."""
    counts, n, k = [384, 130, 5], 1536, 1024
    ids = _layout(counts)
    a, b, a_s, b_s = _operands(ids.numel(), len(counts), n, k, seed=7, tma_aligned=cfg is None)
    out = contiguous(a, b, a_s, b_s, ids, config=cfg)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    run_cfg = contiguous_config(cfg or select_config(ids.numel(), n, k, 1, sms, a_scale_staged=True))
    start = 0
    for e, c in enumerate(counts):
        run = -(-c // CONTIGUOUS_ALIGN) * CONTIGUOUS_ALIGN
        plain = fp8_blockwise_scaled_mm(a[start:start + run], b[e], a_s[start:start + run], b_s[e], config=run_cfg)
        assert torch.equal(out[start:start + c], plain[:c]), f"expert {e} differs ({run_cfg.describe()})"
        start += run


def test_blockwise_granularity():
    counts, n, k = [256, 128, 384], 512, 512
    ids = _layout(counts)
    a, b, a_s, b_s = _operands(ids.numel(), len(counts), n, k, gran=BLOCKWISE, seed=5)
    out = contiguous(a, b, a_s, b_s, ids, scale_granularity=BLOCKWISE)
    _check_rows(out, a, b, a_s, b_s, ids, BLOCKWISE)


def test_malformed_m_indices_come_out_nan():
    g, n, k = 3, 256, 256
    ids = _layout([128, 128, 128])
    a, b, a_s, b_s = _operands(ids.numel(), g, n, k, seed=9)
    bad = ids.clone()
    bad[64:128] = 1  # expert 1's run starts inside expert 0's block
    bad[256:260] = 7  # an expert past G
    bad[320:384] = -1  # a block of expert 2 that starts with padding...
    bad[300:320] = -1
    bad[200:256] = 2  # ...and a run of expert 2 inside expert 1's block
    bad[256] = -1
    bad[260:300] = 0  # a block whose first row is padding, then another expert's rows
    out = contiguous(a, b, a_s, b_s, bad, config=TileConfig(tile_m=128, tile_n=128, cluster_m=1, cluster_n=1))
    flagged = out.isnan().all(dim=1)
    expect = torch.zeros_like(flagged)
    expect[64:128] = True
    expect[200:256] = True
    expect[257:300] = True  # the tile's first row is padding: every valid id in it is flagged
    assert torch.equal(flagged, expect), (flagged.nonzero().flatten().tolist())
    assert not out[~expect].isnan().any()
    good = bad.clone()
    good[expect] = -1
    good[256:260] = -1
    _check_rows(out, a, b, a_s, b_s, good)


def test_graph_replays_with_new_routing():
    g, n, k = 4, 1024, 1024
    ids = _layout([256, 0, 0, 128], pad_blocks=1)
    a, b, a_s, b_s = _operands(ids.numel(), g, n, k, seed=11)
    out = torch.full((ids.numel(), n), float("nan"), device="cuda", dtype=torch.bfloat16)
    contiguous(a, b, a_s, b_s, ids, out=out)  # compile and plan outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        contiguous(a, b, a_s, b_s, ids, out=out)
    for counts in ([1, 1, 1, 1], [512, 0, 0, 0], [0, 128, 0, 200]):
        new = _layout(counts)
        ids.fill_(-1)
        ids[:new.numel()] = new
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_rows(out, a, b, a_s, b_s, ids)


def test_torch_op_and_compiled_graph():
    g, n, k = 3, 512, 512
    ids = _layout([128, 100, 200])
    a, b, a_s, b_s = _operands(ids.numel(), g, n, k, seed=13)
    ops = torch.ops.cute_kernels
    # torch's schema check compares inputs before / after with allclose, which float8 tensors do not implement
    torch.library.opcheck(ops.fp8_blockwise_grouped_mm_contiguous.default, (a, b, a_s, b_s, ids),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    f = torch.compile(lambda *t: ops.fp8_blockwise_grouped_mm_contiguous(*t) * 2, fullgraph=True,
                      backend="aot_eager")
    out = f(a, b, a_s, b_s, ids)
    eager = contiguous(a, b, a_s, b_s, ids)
    valid = ids >= 0
    assert torch.equal(out[valid], eager[valid] * 2)


def test_argument_errors():
    ids = _layout([128, 128])
    a, b, a_s, b_s = _operands(ids.numel(), 2, 256, 256)
    with pytest.raises(ValueError, match="m_indices must be on cuda"):
        contiguous(a, b, a_s, b_s, ids.cpu())
    with pytest.raises(ValueError, match="^m_indices must have shape"):
        contiguous(a, b, a_s, b_s, ids[:128])
    with pytest.raises(ValueError, match="^config must be an unswapped tile of 64 or 128 rows"):
        contiguous(a, b, a_s, b_s, ids, config=TileConfig(tile_m=64, tile_n=32, cluster_m=1, cluster_n=1,
                                                           swap_ab=True))
    with pytest.raises(ValueError, match="a must have a multiple of 128 rows"):
        contiguous(a[:200], b, a_s[:200], b_s, ids[:200])
