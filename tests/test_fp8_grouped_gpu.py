"""GPU tier of fp8_blockwise_grouped_mm (MoE experts in DeepGEMM's masked layout): the valid rows of every expert
against the float64 reference and bit for bit against fp8_blockwise_scaled_mm on the same tile config; skipped token
tiles leave the NaN-poisoned output untouched; a CUDA graph replays with new counts; counts of 0, past M_max and
negative; the argument errors."""

import pytest
import torch

from cute_kernels import fp8_blockwise_grouped_mm, fp8_blockwise_scaled_mm
from cute_kernels.configs import TileConfig
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_tma_aligned_mn_major
from cute_kernels.ops.fp8_blockwise_grouped_mm import masked_config
from cute_kernels.ops.fp8_blockwise_scaled_mm import select_config
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

pytestmark = pytest.mark.gpu

GROUPWISE, BLOCKWISE = (1, 128, 128), (128, 128, 128)


def _experts(g, m_max, n, k, gran=GROUPWISE, seed=0, tma_aligned=True):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(g, m_max, k, device="cuda", generator=gen) * 3
    w = torch.randn(g, n, k, device="cuda", generator=gen) * torch.exp2(
        torch.randint(-4, 2, (g, n, 1), device="cuda", generator=gen).float())  # experts' rows of other magnitudes
    a, a_s = quantize_fp8_per_token_group(x, 128) if gran[0] == 1 else quantize_fp8_blockwise(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    if tma_aligned and gran[0] == 1:
        a_s = to_tma_aligned_mn_major(a_s)
    return a, b, a_s, b_s


def _poisoned(g, m_max, n, dtype=torch.bfloat16):
    return torch.full((g, m_max, n), float("nan"), device="cuda", dtype=dtype)


def _check_valid_rows(out, a, b, a_s, b_s, counts, gran=GROUPWISE):
    ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, gran)
    for e, c in enumerate(counts):
        c = max(0, min(c, a.shape[1]))
        if c == 0:
            continue
        got, want = out[e, :c].double(), ref[e, :c]
        assert not got.isnan().any(), f"expert {e}: valid rows left unwritten"
        rel = ((got - want).norm() / want.norm()).item()
        assert rel <= 1e-2, f"expert {e} ({c} rows): relative error {rel:.3g}"


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("g,m_max,n,k,counts", [
    (4, 256, 512, 1024, [256, 0, 77, 129]),  # 128-row tiles: a full expert, an empty one, ragged ones
    (3, 64, 2112, 1024, [1, 64, 33]),  # decode-size experts (swapped tiles), N not a multiple of 128
    (5, 200, 1024, 2048, [200, 100, 3, 0, 150]),  # M_max not a multiple of the tile: the clamped last tile
    (2, 384, 4096, 512, [300, 1]),
    (1, 128, 256, 256, [128]),
    (40, 32, 256, 256, [0, 1, 32, 5, 0, 0, 17, 31] * 5),  # many experts: the work list's scan over the counts
])
def test_valid_rows_against_reference(g, m_max, n, k, counts, out_dtype):
    a, b, a_s, b_s = _experts(g, m_max, n, k, seed=g * m_max + n)
    masked = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = _poisoned(g, m_max, n, out_dtype)
    fp8_blockwise_grouped_mm(a, b, a_s, b_s, masked, out_dtype=out_dtype, out=out)
    _check_valid_rows(out, a, b, a_s, b_s, counts)
    for e, c in enumerate(counts):
        if c == 0:
            assert out[e].isnan().all(), f"expert {e} has no tokens: its output must be left untouched"


def test_skipped_tiles_are_not_written():
    """With 128-row token tiles and M_max a multiple of 128, rows from the first tile past the count stay NaN."""
    g, m_max, n, k = 3, 512, 384, 512
    a, b, a_s, b_s = _experts(g, m_max, n, k)
    counts = [1, 130, 384]
    cfg = TileConfig(tile_m=128, tile_n=128, cluster_m=1, cluster_n=1)
    out = _poisoned(g, m_max, n)
    fp8_blockwise_grouped_mm(a, b, a_s, b_s, torch.tensor(counts, dtype=torch.int32, device="cuda"), out=out,
                             config=cfg)
    _check_valid_rows(out, a, b, a_s, b_s, counts)
    for e, c in enumerate(counts):
        first_skipped = -(-c // 128) * 128
        assert out[e, first_skipped:].isnan().all(), f"expert {e}: a skipped tile wrote rows"
        assert not out[e, :first_skipped].isnan().any()  # a straddling tile writes all its rows


@pytest.mark.parametrize("expected_m", [None, 8, 64, 200])
def test_bit_equal_to_the_batched_op_on_the_same_config(expected_m):
    g, m_max, n, k = 4, 192, 1536, 1024
    a, b, a_s, b_s = _experts(g, m_max, n, k, seed=7)
    counts = [192, 5, 64, 100]
    out = fp8_blockwise_grouped_mm(a, b, a_s, b_s, torch.tensor(counts, dtype=torch.int32, device="cuda"),
                                   expected_m=expected_m)
    cfg = masked_config(select_config(min(expected_m or m_max, m_max), n, k, g, torch.cuda.get_device_properties(
        0).multi_processor_count, a_scale_staged=True))
    full = fp8_blockwise_scaled_mm(a, b, a_s, b_s, config=cfg)
    for e, c in enumerate(counts):
        assert torch.equal(out[e, :c], full[e, :c]), f"expert {e} differs from the batched op ({cfg.describe()})"


def test_counts_past_m_max_and_negative():
    g, m_max, n, k = 3, 96, 256, 256
    a, b, a_s, b_s = _experts(g, m_max, n, k, seed=3)
    out = _poisoned(g, m_max, n)
    fp8_blockwise_grouped_mm(a, b, a_s, b_s, torch.tensor([1000, -5, 96], dtype=torch.int32, device="cuda"), out=out)
    _check_valid_rows(out, a, b, a_s, b_s, [96, 0, 96])
    assert out[1].isnan().all()


def test_graph_replays_with_new_counts():
    g, m_max, n, k = 4, 128, 1024, 1024
    a, b, a_s, b_s = _experts(g, m_max, n, k, seed=11)
    masked = torch.tensor([128, 0, 0, 7], dtype=torch.int32, device="cuda")
    out = _poisoned(g, m_max, n)
    fp8_blockwise_grouped_mm(a, b, a_s, b_s, masked, out=out)  # compile and plan outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fp8_blockwise_grouped_mm(a, b, a_s, b_s, masked, out=out)
    for counts in ([3, 128, 0, 64], [0, 0, 0, 0], [128, 128, 128, 128]):
        out.fill_(float("nan"))
        masked.copy_(torch.tensor(counts, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        _check_valid_rows(out, a, b, a_s, b_s, counts)
        for e, c in enumerate(counts):
            if c == 0:
                assert out[e].isnan().all()


def test_blockwise_granularity_and_k_major_scales():
    g, m_max, n, k = 2, 256, 512, 512
    a, b, a_s, b_s = _experts(g, m_max, n, k, gran=BLOCKWISE, seed=5)
    counts = [256, 129]
    out = fp8_blockwise_grouped_mm(a, b, a_s, b_s, torch.tensor(counts, dtype=torch.int32, device="cuda"),
                                   scale_granularity=BLOCKWISE)
    _check_valid_rows(out, a, b, a_s, b_s, counts, BLOCKWISE)
    a, b, a_s, b_s = _experts(g, m_max, n, k, seed=6, tma_aligned=False)  # K-major a_scale: consumer-loaded
    out = fp8_blockwise_grouped_mm(a, b, a_s, b_s, torch.tensor(counts, dtype=torch.int32, device="cuda"))
    _check_valid_rows(out, a, b, a_s, b_s, counts)


def test_torch_op_and_compiled_graph():
    g, m_max, n, k = 3, 128, 512, 512
    a, b, a_s, b_s = _experts(g, m_max, n, k, seed=13)
    ops = torch.ops.cute_kernels
    full = torch.full((g,), m_max, dtype=torch.int32, device="cuda")  # every row valid: a deterministic output
    # torch's schema check compares inputs before / after with allclose, which float8 tensors do not implement
    torch.library.opcheck(ops.fp8_blockwise_grouped_mm.default, (a, b, a_s, b_s, full),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    counts = [5, 0, 128]
    masked = torch.tensor(counts, dtype=torch.int32, device="cuda")
    f = torch.compile(lambda *t: ops.fp8_blockwise_grouped_mm(*t) * 2, fullgraph=True, backend="aot_eager")
    out = f(a, b, a_s, b_s, masked)
    _check_valid_rows(out / 2, a, b, a_s, b_s, counts)
    eager = fp8_blockwise_grouped_mm(a, b, a_s, b_s, masked)
    for e, c in enumerate(counts):
        assert torch.equal(out[e, :c], eager[e, :c] * 2)


def test_argument_errors():
    a, b, a_s, b_s = _experts(2, 64, 256, 256)
    ok = torch.tensor([3, 4], dtype=torch.int32, device="cuda")
    cases = [
        ((a, b, a_s, b_s, ok.long()), TypeError, "^masked_m must have dtype"),
        ((a, b, a_s, b_s, ok[:1]), ValueError, "^masked_m must have shape"),
        ((a, b, a_s, b_s, ok.cpu()), ValueError, "masked_m must be on cuda"),
        ((a[0], b[0], a_s[0], b_s[0], ok), ValueError, "^a must be"),
        ((a, b[:1], a_s, b_s[:1], ok), ValueError, "batch"),
    ]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            fp8_blockwise_grouped_mm(*args)
    with pytest.raises(ValueError, match="expected_m must be a positive int"):
        fp8_blockwise_grouped_mm(a, b, a_s, b_s, ok, expected_m=0)
