"""GPU tier of int8_scaled_mm: every result against the float64 reference, on fresh random data, NaN-poisoned outputs."""

import pytest
import torch

from cute_kernels import TileConfig, int8_scaled_mm
from cute_kernels.configs import replace, select_sm90_int8, shipped_sm90_int8_configs
from cute_kernels.reference import int8_scaled_mm_ref
from tests.conftest import int8_gemm_inputs

pytestmark = pytest.mark.gpu


def _check(out, a, b, a_scale, b_scale, bias, out_dtype):
    ref = int8_scaled_mm_ref(a, b, a_scale, b_scale, bias)
    assert out.dtype == out_dtype and out.shape == ref.shape
    assert not torch.isnan(out).any(), "kernel left elements unwritten (NaN poison survived)"
    # The only error allowed: fp32 epilogue arithmetic plus one rounding to the output type.
    tol = (2 ** -7 if out_dtype == torch.bfloat16 else 2 ** -10) * ref.abs() + 1e-2
    err = (out.double() - ref).abs()
    assert (err <= tol).all(), f"max abs err {err.max().item():.4g}, max |ref| {ref.abs().max().item():.4g}"


SHAPES = [
    (1, 4096, 4096), (17, 256, 512), (16, 8, 16), (4097, 264, 272), (128, 4096, 1024), (32, 14336, 256),
    (64, 1024, 4096), (300, 1000, 2000), (1024, 2048, 1024),
]


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_shapes(m, n, k, out_dtype):
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, out_dtype=out_dtype, seed=m * 7 + n + k)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=out_dtype, out=out)
    _check(out, a, b, a_s, b_s, bias, out_dtype)


@pytest.mark.parametrize("a_kind", ["vector", "scalar"])
@pytest.mark.parametrize("b_kind", ["vector", "scalar"])
@pytest.mark.parametrize("bias", [True, False])
def test_epilogue_variants(a_kind, b_kind, bias):
    for m in (5, 700):  # one swapped (decode) and one plain config
        a, b, a_s, b_s, bias_t = int8_gemm_inputs(m, 520, 384, a_kind=a_kind, b_kind=b_kind, bias=bias, seed=m)
        out = int8_scaled_mm(a, b, a_s, b_s, bias_t)
        _check(out, a, b, a_s, b_s, bias_t, torch.bfloat16)


@pytest.mark.parametrize("cfg", shipped_sm90_int8_configs(), ids=lambda c: c.describe())
def test_every_shipped_config(cfg):
    a, b, a_s, b_s, bias = int8_gemm_inputs(333, 776, 1040, seed=3)
    out = torch.full((333, 776), float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg)
    _check(out, a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("m,n,k,tile_n", [(200, 4096, 512, 64), (129, 2048, 1024, 64), (1024, 14336, 256, 224)])
def test_fitted_tile_width_through_the_dispatch(m, n, k, tile_n):
    """The table's own call path onto the widths of ``configs.fit_tile_width`` (session 23), ragged M included."""
    assert select_sm90_int8(m, n, k).tile_n == tile_n
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, seed=m + n)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out=out)
    _check(out, a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("m", [3, 513])
def test_batched(m):
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, 256, 512, batch=3, seed=m)
    out = int8_scaled_mm(a, b, a_s, b_s, bias)
    _check(out, a, b, a_s, b_s, bias, torch.bfloat16)


def test_current_stream_and_repeat_calls():
    a, b, a_s, b_s, bias = int8_gemm_inputs(64, 512, 256)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out1 = int8_scaled_mm(a, b, a_s, b_s, bias)
        out2 = int8_scaled_mm(a, b, a_s, b_s, bias)  # warm path
    s.synchronize()
    _check(out1, a, b, a_s, b_s, bias, torch.bfloat16)
    assert torch.equal(out1, out2)


def test_warm_path_still_validates():
    a, b, a_s, b_s, bias = int8_gemm_inputs(64, 512, 256)
    int8_scaled_mm(a, b, a_s, b_s, bias)
    with pytest.raises((TypeError, ValueError), match="b_scale"):
        int8_scaled_mm(a, b, a_s, b_s.double(), bias)
    misaligned = torch.empty(64 * 256 + 1, dtype=torch.int8, device="cuda")[1:].view(64, 256)
    misaligned.copy_(a)
    with pytest.raises(ValueError, match="a must start at a 16-byte aligned"):
        int8_scaled_mm(misaligned, b, a_s, b_s, bias)


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (16, 1000, 16), (7, 520, 4112), (100, 264, 8192), (2, 256, 640)])
def test_split_k_on_off_agree(m, n, k):
    """The in-kernel split-K reduction is exact: it must give bit-identical results to the unsplit kernel."""
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, seed=k + m)
    base = TileConfig(tile_m=128, tile_n=16 if m <= 16 else 128, cluster_m=1, cluster_n=1, swap_ab=True)
    outs = []
    for split_k in (1, 3, 8):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        cfg = TileConfig(**{**base.__dict__, "split_k": split_k})
        for _ in range(2):  # the second call reuses the workspace and the semaphores the first one reset
            int8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg)
        outs.append(out)
    _check(outs[0], a, b, a_s, b_s, bias, torch.bfloat16)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("m", [300, 5])
def test_fp32_output(m):
    a, b, a_s, b_s, _ = int8_gemm_inputs(m, 264, 512, bias=False)
    bias = torch.randn(264, device="cuda")
    out = torch.full((m, 264), float("nan"), device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=torch.float32, out=out)
    ref = int8_scaled_mm_ref(a, b, a_s, b_s, bias)
    err = (out.double() - ref).abs()
    assert (err <= 1e-5 * ref.abs() + 1e-4).all(), f"max err {err.max().item():.3g} at {divmod(err.argmax().item(), 264)}"


@pytest.mark.parametrize("sm_count", [1, 40])
def test_sm_count_cap(sm_count):
    a, b, a_s, b_s, bias = int8_gemm_inputs(700, 1024, 512)
    out = torch.full((700, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out=out, sm_count=sm_count)
    _check(out, a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("m,n,k", [(5, 264, 512), (300, 1000, 2000), (1024, 8192, 1024)])  # swap_ab / plain tiles
@pytest.mark.parametrize("c_dtype", [torch.float32, torch.bfloat16])
def test_added_operand(m, n, k, c_dtype):
    """out = acc * a_scale * b_scale + bias + c, c a full [M, N] operand (a split-K plan falls back to unsplit)."""
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k)
    c = (torch.randn(m, n, device="cuda") * 50).to(c_dtype)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out=out, c=c)
    ref = int8_scaled_mm_ref(a, b, a_s, b_s, bias) + c.double()
    assert not torch.isnan(out).any()
    err = (out.double() - ref).abs()
    assert (err <= 2 ** -7 * ref.abs() + 1e-2).all(), f"max abs err {err.max().item():.4g}"


def _int32_bias(n, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    # about the accumulator's own magnitude (|acc| ~ 1e5-1e6 here), so that a misplaced bias cannot pass
    return torch.randint(-2**20, 2**20, (n,), dtype=torch.int32, device="cuda", generator=g)


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (17, 256, 512), (16, 8, 16), (4097, 264, 272),
                                   (64, 1024, 4096), (300, 1000, 2000)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_int32_bias_enters_before_the_scales(m, n, k, out_dtype):
    """An int32 bias: out = (acc + bias) * a_scale * b_scale, on swapped, plain and split tiles."""
    a, b, a_s, b_s, _ = int8_gemm_inputs(m, n, k, bias=False, seed=m + 3 * n + k)
    bias = _int32_bias(n, m + n)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=out_dtype, out=out)
    _check(out, a, b, a_s, b_s, bias, out_dtype)


def test_int32_bias_split_batched_added_operand_and_sm80():
    # split-K: the bias is added once, by the tile's last slice, and the result equals the unsplit one bit for bit
    a, b, a_s, b_s, _ = int8_gemm_inputs(16, 1024, 4096, bias=False, seed=5)
    bias = _int32_bias(1024, 5)
    outs = []
    for split_k in (1, 4):
        cfg = TileConfig(tile_m=128, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True, split_k=split_k)
        out = torch.full((16, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
        outs.append(int8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg))
    _check(outs[0], a, b, a_s, b_s, bias, torch.bfloat16)
    assert torch.equal(outs[0], outs[1])
    # batched: one bias for every batch entry
    a, b, a_s, b_s, _ = int8_gemm_inputs(33, 256, 512, batch=3, bias=False, seed=6)
    bias = _int32_bias(256, 6)
    _check(int8_scaled_mm(a, b, a_s, b_s, bias), a, b, a_s, b_s, bias, torch.bfloat16)
    # with an added c (the distributed op's fused sum): (acc + bias) * scales + c
    a, b, a_s, b_s, _ = int8_gemm_inputs(300, 1000, 2000, bias=False, seed=7)
    bias = _int32_bias(1000, 7)
    c = torch.randn(300, 1000, device="cuda") * 50
    out = int8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=torch.float32, c=c)
    ref = int8_scaled_mm_ref(a, b, a_s, b_s, bias) + c.double()
    assert ((out.double() - ref).abs() <= 2 ** -20 * ref.abs() + 1e-3).all()
    # the SM80-class kernel, forced
    a, b, a_s, b_s, _ = int8_gemm_inputs(77, 1032, 528, bias=False, seed=9)
    bias = _int32_bias(1032, 9)
    _check(int8_scaled_mm(a, b, a_s, b_s, bias, arch="sm80"), a, b, a_s, b_s, bias, torch.bfloat16)


@pytest.mark.parametrize("raster", [(4, True), (2, True), (4, False)])
@pytest.mark.parametrize("m,n,batch", [(2048, 2048, None), (2043, 2040, None), (700, 1032, 3)])
def test_swizzled_schedule(raster, m, n, batch):
    """The swizzled persistent schedule (configs.raster_for picks it for problems too large to test here, so the
    compiled kernel is called with it directly) on 1x2-cluster tiles: even, ragged (tiles past the edge inside the
    last cluster, counts the swizzle does not divide) and batched problems - every element checked."""
    from cute_kernels.ops.int8_scaled_mm import _compile_sm90

    cfg = replace(select_sm90_int8(8192, 8192, 8192), split_tail=1)  # the unsplit kernel (tests/test_split_k_gpu.py
    # runs the split one with swizzled orders)
    fn = _compile_sm90(3 if batch else 2, "vector", "vector", True, torch.bfloat16, cfg, 132, raster=raster)
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, 256, batch=batch, seed=m + n)
    out = torch.full((batch, m, n) if batch else (m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    fn(a, b, out, a_s, b_s, bias, None, None)
    _check(out, a, b, a_s, b_s, bias, torch.bfloat16)


# Token counts whose last token tile is moved back to end at the last token (``Sm90GemmKernel.tile_shifts``): it
# recomputes rows of the tile before it, and both store them. 257 on the 128x128 2x1-cluster row also has a tile past
# the last one (the cluster's partner), which now computes the last tile again and stores nothing.
CLAMPED = [
    (129, 4096, 512, None), (257, 776, 1040, None), (200, 264, 272, None),
    (257, 776, 1040, TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1, split_k=4)),  # split + phantom
    (4097, 520, 384, None), (65, 776, 1040, TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1)),
    # swapped: the tokens are the kernel's N, several token tiles of 16 / 48, the last one moved
    (33, 1000, 640, TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True)),
    (100, 776, 1040, TileConfig(tile_m=128, tile_n=48, cluster_m=1, cluster_n=1, swap_ab=True, split_k=4)),
]


@pytest.mark.parametrize("m,n,k,cfg", CLAMPED, ids=lambda v: v.describe() if isinstance(v, TileConfig) else str(v))
@pytest.mark.parametrize("batch", [None, 2])
def test_clamped_last_token_tile(m, n, k, cfg, batch):
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, batch=batch, seed=m + n + (batch or 0))
    shape = (m, n) if batch is None else (batch, m, n)
    out = torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out=out, config=cfg)
    _check(out, a, b, a_s, b_s, bias, torch.bfloat16)


def test_added_c_keeps_tiles_in_place():
    """With c the last tile is not moved (c may be the output itself): c = out accumulates exactly once."""
    a, b, a_s, b_s, bias = int8_gemm_inputs(257, 776, 1040, seed=11)
    out = torch.randn(257, 776, device="cuda").bfloat16()
    before = out.clone()
    int8_scaled_mm(a, b, a_s, b_s, bias, out=out, c=out)
    ref = int8_scaled_mm_ref(a, b, a_s, b_s, bias) + before.double()
    err = (out.double() - ref).abs()
    assert (err <= 2 ** -7 * ref.abs() + 2e-2).all(), f"max abs err {err.max().item():.4g}"


@pytest.mark.parametrize("m,n,k,batch", [(17, 4104, 4096, None), (1, 776, 256, None), (300, 1032, 1040, None),
                                         (5, 520, 640, 3), (4097, 2048, 384, None)])
def test_weight_preload_bitwise_equal(m, n, k, batch, monkeypatch):
    """The weight's first K-tiles loaded before the PDL wait (configs.WEIGHT_PRELOAD; session 27) change only when
    bytes arrive: the op's output with the rule's preload, with the whole ring (16) and without (0) is bit-identical
    and matches float64 - swapped split-K decode tiles, fewer K-tiles than the preload, a ragged K with clusters,
    batched, and a multi-wave problem."""
    from cute_kernels.ops import int8_scaled_mm as op

    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, batch=batch, seed=m + n + k)
    outs = {}
    for preload in (None, 16, 0):
        monkeypatch.setattr(op, "WEIGHT_PRELOAD_KTILES", preload)
        op._validated.clear()
        out = torch.full(((batch,) if batch else ()) + (m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        outs[preload] = int8_scaled_mm(a, b, a_s, b_s, bias, out=out)
    op._validated.clear()
    _check(outs[None], a, b, a_s, b_s, bias, torch.bfloat16)
    assert torch.equal(outs[None], outs[0]) and torch.equal(outs[16], outs[0])


# ------------------------------------------------------------------ asymmetric activations (azp_adj / azp, vLLM's azp)
def _zero_points(a, b, per_token: bool, seed: int):
    """(azp_adj, azp) for codes ``a`` read as a - azp: per token, azp random in [-128, 127] and azp_adj = b's column
    sums; per tensor, one zero point folded into azp_adj."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    col_sums = b.to(torch.int32).sum(-2, dtype=torch.int32)  # [.., N]; the batch shares one b in these tests' use
    col_sums = col_sums if col_sums.dim() == 1 else col_sums[0]
    if per_token:
        return col_sums.contiguous(), torch.randint(-128, 128, (a.shape[-2],), dtype=torch.int32, device="cuda",
                                                    generator=g)
    zp = int(torch.randint(-128, 128, (1,), generator=g, device="cuda").item())
    return (col_sums * zp).contiguous(), None


def _check_azp(out, a, b, a_s, b_s, bias, azp_adj, azp, out_dtype=torch.bfloat16):
    ref = int8_scaled_mm_ref(a, b, a_s, b_s, bias, azp_adj=azp_adj, azp=azp)
    assert out.dtype == out_dtype and out.shape == ref.shape
    assert not torch.isnan(out).any(), "kernel left elements unwritten (NaN poison survived)"
    tol = (2 ** -7 if out_dtype == torch.bfloat16 else 2 ** -10) * ref.abs() + 1e-2
    err = (out.double() - ref).abs()
    assert (err <= tol).all(), f"max abs err {err.max().item():.4g}, max |ref| {ref.abs().max().item():.4g}"


@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (5, 520, 384), (16, 1032, 1040), (77, 2048, 1024),
                                   (300, 776, 2000), (1024, 2048, 1024), (4097, 264, 272)])
@pytest.mark.parametrize("per_token", [True, False], ids=["token", "tensor"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16])
def test_zero_points(m, n, k, per_token, out_dtype):
    """acc - azp[i] * azp_adj[j] (or - azp_adj[j]) before the scales and the bias, on the swapped split decode
    tiles, plain and multi-wave tiles, ragged M / N / K."""
    a, b, a_s, b_s, bias = int8_gemm_inputs(m, n, k, out_dtype=out_dtype, seed=m + n + k)
    azp_adj, azp = _zero_points(a, b, per_token, seed=m)
    out = torch.full((m, n), float("nan"), dtype=out_dtype, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=out_dtype, out=out, azp_adj=azp_adj, azp=azp)
    _check_azp(out, a, b, a_s, b_s, bias, azp_adj, azp, out_dtype)
    again = int8_scaled_mm(a, b, a_s, b_s, bias, out_dtype=out_dtype, azp_adj=azp_adj, azp=azp)  # the warm path
    assert torch.equal(again, out)


def test_zero_points_cancel_exactly():
    """Codes equal to their token's zero point except at two positions per row: acc and azp * azp_adj (each ~2^26.6
    here, where fp32's spacing is 8) cancel to a result of at most 254 in magnitude, an integer that fp32 and bf16
    hold exactly. The correction is taken in int32, so with unit scales the output equals the reference on both
    kernels; an fp32 subtraction would be off by up to ~8."""
    m, n, k = 64, 1024, 8192
    g = torch.Generator(device="cuda").manual_seed(5)
    azp = torch.randint(100, 126, (m,), dtype=torch.int32, device="cuda", generator=g)
    noise = torch.zeros(m, k, dtype=torch.int32, device="cuda")
    cols = torch.randint(0, k, (m, 2), device="cuda", generator=g)
    noise.scatter_(1, cols, torch.randint(0, 2, (m, 2), dtype=torch.int32, device="cuda", generator=g) * 2 - 1)
    a = (azp[:, None] + noise).to(torch.int8)
    w = torch.randint(100, 128, (n, k), dtype=torch.int8, device="cuda", generator=g)
    b, adj = w.t(), w.sum(1, dtype=torch.int32)
    ones = torch.ones(m, device="cuda"), torch.ones(n, device="cuda")
    ref = int8_scaled_mm_ref(a, b, *ones, azp_adj=adj, azp=azp)
    assert ref.abs().max() <= 254 and ref.abs().max() > 0
    for arch, out_dtype in (("sm90", torch.float32), ("sm90", torch.bfloat16), ("sm80", torch.bfloat16)):
        out = int8_scaled_mm(a, b, *ones, out_dtype=out_dtype, azp_adj=adj, azp=azp, arch=arch)
        assert torch.equal(out.double(), ref), (arch, out_dtype, (out.double() - ref).abs().max())


@pytest.mark.parametrize("per_token", [True, False], ids=["token", "tensor"])
def test_zero_points_sm80_split_batched_and_int32_bias(per_token):
    """The SM80-class kernel (split-K and not), a batch sharing the zero points, and an int32 bias beside them."""
    for m, n, k, batch in ((3, 1032, 4096, None), (200, 264, 512, None), (9, 520, 640, 3)):
        a, b, a_s, b_s, _ = int8_gemm_inputs(m, n, k, batch=batch, seed=k)
        b = b[0].expand(*b.shape) if batch else b  # the zero-point sums are of the one shared weight
        azp_adj, azp = _zero_points(a, b, per_token, seed=n)
        bias = torch.randint(-1000, 1000, (n,), dtype=torch.int32, device="cuda")
        for arch in ("sm80", "sm90"):
            out = int8_scaled_mm(a, b, a_s, b_s, bias, azp_adj=azp_adj, azp=azp, arch=arch)
            _check_azp(out, a, b, a_s, b_s, bias, azp_adj, azp)


def test_zero_point_errors_on_gpu():
    a, b, a_s, b_s, bias = int8_gemm_inputs(8, 256, 256)
    adj = b.sum(0, dtype=torch.int32)
    with pytest.raises(ValueError, match="azp_adj must be a CUDA tensor"):
        int8_scaled_mm(a, b, a_s, b_s, bias, azp_adj=adj.cpu())
    with pytest.raises(ValueError, match="azp needs azp_adj|needs azp_adj"):
        int8_scaled_mm(a, b, a_s, b_s, bias, azp=torch.zeros(8, dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="azp must have shape"):
        int8_scaled_mm(a, b, a_s, b_s, bias, azp_adj=adj, azp=torch.zeros(9, dtype=torch.int32, device="cuda"))
