"""CPU tier of the weight-only WGMMA path: the blob layout (against the WGMMA A fragment the DSL lays out), the
dispatch rule, and every shipped variant compiled for sm_90a with its SASS read (register-sourced HGMMA, no spills).
"""

from dataclasses import replace

import pytest
import torch

from cute_kernels.configs import TileConfig
from cute_kernels.formats.bitpack import pack_weights
from cute_kernels.weight_only import config, wgmma

FORMATS = [(8, "int8"), (4, "int4"), (4, "awq"), (2, "int2"), (1, "int1")]


@pytest.mark.parametrize("bits,fmt_key", FORMATS)
@pytest.mark.parametrize("n,k", [(64, 64), (200, 300), (8, 1088)])
def test_blob_round_trip(bits, fmt_key, n, k):
    codes = torch.randint(0, 1 << bits, (n, k))
    blob = wgmma.blob_from_codes(codes, bits, fmt_key)
    assert blob.dtype == torch.int64
    assert blob.shape == (-(-n // 64), -(-k // 64) * 64 * bits)
    assert torch.equal(wgmma.codes_from_blob(blob, bits, fmt_key, n, k), codes)


def test_blob_padding_is_zero_codes():
    codes = torch.full((3, 5), 15)
    back = wgmma.codes_from_blob(wgmma.blob_from_codes(codes, 4, "int4"), 4, "int4", 64, 64)
    assert back[:3, :5].eq(15).all() and back.sum() == 15 * 15


@pytest.mark.parametrize("bits,fmt_key", FORMATS)
def test_blob_from_packed_in_chunks(bits, fmt_key):
    n, k = 300, 200  # 5 row blocks (the last ragged), K not a multiple of the K-tile
    packed = torch.randint(0, 256, (n, k * bits // 8), dtype=torch.uint8)
    whole = wgmma.blob_from_codes(wgmma.codes_from_packed(packed, bits, k), bits, fmt_key)
    for chunk_rows in (64, 128, 256, None):
        assert torch.equal(wgmma.blob_from_packed(packed, bits, fmt_key, k, chunk_rows), whole)


def test_blob_cache_follows_the_weight():
    import gc

    wgmma.clear_cache()
    packed = torch.randint(0, 256, (64, 128), dtype=torch.uint8)
    a = wgmma.cached_blob(packed, 4, "int4", 256)
    assert wgmma.cached_blob(packed, 4, "int4", 256) is a
    packed.add_(1)  # an in-place update bumps the version: the blob is rebuilt from the new codes
    b = wgmma.cached_blob(packed, 4, "int4", 256)
    assert b is not a and torch.equal(b, wgmma.blob_from_packed(packed, 4, "int4", 256))
    del packed, a, b
    gc.collect()
    assert not wgmma._blobs


@pytest.mark.parametrize("scale_dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fmt_key", ["int8", "int4", "int2", "int1", "awq"])
def test_param_words_layout(scale_dtype, x_dtype, fmt_key):
    """Rows g * W .. g * W + W - 1 of the kernel's group parameters = the context words of group g, per weight row:
    word 0 holds the scale of (n, g) rounded once to x's dtype (what ``.to(x_dtype)`` gives) in both halves; AWQ's
    word 1 -(MAGIC + zero point) in both halves, MAGIC = 1024 (fp16) / 128 (bf16): the decode's (MAGIC + u) + word 1
    = u - z exactly. (``awq_fma``'s one word: ``test_awq_one_fma_decode_from_staged_words``.)"""
    n, groups = 72, 5
    scales = (torch.rand(n, groups, dtype=torch.float64) * 2 - 1).to(scale_dtype)  # negative scales too
    zeros = torch.randint(0, 16, (n, groups), dtype=torch.uint8) if fmt_key == "awq" else None
    words = wgmma.param_words(fmt_key, scales, zeros, x_dtype)
    w = 2 if fmt_key == "awq" else 1
    assert words.dtype == torch.int32 and words.shape == (groups * w, n) and words.is_contiguous()
    halves = words.view(torch.int16).view(groups, w, n, 2).view(x_dtype)  # little endian: [..., 0] = low half
    assert torch.equal(halves[:, 0, :, 0], halves[:, 0, :, 1])
    assert torch.equal(halves[:, 0, :, 0].t(), scales.to(x_dtype))
    if fmt_key == "awq":
        magic = 1024.0 if x_dtype == torch.float16 else 128.0
        assert torch.equal(halves[:, 1, :, 0], halves[:, 1, :, 1])
        assert torch.equal(halves[:, 1, :, 0].t().double(), -(magic + zeros.double()))


@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fmt_key", ["int8", "int4", "int2", "int1", "awq"])
def test_decode_from_staged_context_words(fmt_key, x_dtype, scaled):
    """The kernel's decode of a K-tile word with the group parameters it reads from shared memory (``param_words``
    -> ``group_ctx_words`` -> ``decode_pair``, run on an emulated warp): pair q of a word holds the format's values of
    elements ``pair_elems(q)`` times the scale rounded to x's dtype, rounded once to x's dtype. One row per lane."""
    import numpy as np

    from cute_kernels.weight_only.formats import BF16, F16, format_by_key

    from . import weight_only_simt as simt

    fmt = format_by_key(fmt_key)
    if fmt.has_zeros and not scaled:
        pytest.skip("AWQ always has scales")
    ct = F16 if x_dtype == torch.float16 else BF16
    gen = torch.Generator().manual_seed(fmt.bits)
    scales = (torch.rand(32, 1, generator=gen, dtype=torch.float64) * 4 - 2).float() if scaled else None
    zeros = torch.randint(0, 16, (32, 1), generator=gen, dtype=torch.uint8) if fmt.has_zeros else None
    words = torch.randint(0, 2**32, (32,), generator=gen, dtype=torch.int64)
    codes = (words.unsqueeze(1) >> (torch.arange(fmt.values_per_word) * fmt.bits)) & ((1 << fmt.bits) - 1)
    values = {"int8": lambda c: c - 256 * (c >= 128), "int4": lambda c: c - 16 * (c >= 8), "int2": lambda c: c - 2,
              "int1": lambda c: 2 * c - 1, "awq": lambda c: c - zeros.to(torch.int64)}[fmt_key](codes).double()
    if scaled:
        values = (values * scales.to(x_dtype).double()).to(x_dtype)  # exact product, one rounding
    with simt.emulated(simt.Memory()):
        ctx = None
        if scaled:
            staged = wgmma.param_words(fmt_key, scales, zeros, x_dtype)  # [W, 32 rows]
            ctx = fmt.group_ctx_words(ct, [simt.u32(staged[i].numpy()) for i in range(staged.shape[0])])
        prepared = fmt.prepare_word(simt.u32(words.numpy()), ct)
        for q in range(fmt.pairs_per_word):
            lo, hi = simt._halves(fmt.decode_pair(prepared, q, ct, ctx), ct.x2)
            for half, e in zip((lo, hi), fmt.pair_elems(q)):
                assert np.array_equal(half, values[:, e].double().numpy()), (q, e)


def _awq_fma_case(max_scale, dtype=torch.float16, n=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    scales = ((torch.rand(n, 1, generator=gen, dtype=torch.float64) * 2 - 1) * max_scale).to(dtype)
    scales[0, 0] = max_scale  # the largest |s| is exactly max_scale
    zeros = torch.randint(0, 16, (n, 1), generator=gen, dtype=torch.uint8)
    words = torch.randint(0, 2**32, (n,), generator=gen, dtype=torch.int64)
    codes = (words.unsqueeze(1) >> (torch.arange(8) * 4)) & 15
    return scales, zeros, words, codes


@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("max_scale", [0.01, 0.2, 0.3, 3.0, 500.0])
def test_awq_one_fma_decode_from_staged_words(x_dtype, max_scale):
    """awq_fma (WGMMA path): the staged words are S = s 2^(E - j - e) (exact) and C = -z s 2^-e rounded once to x's
    dtype, with e the least exponent that keeps S finite (0 below |s| = 0.25); the decode of pair q is
    round(u S h + C) for the subnormal h = u 2^(j - E), i.e. round(u s 2^-e + C) exactly, and 2^e times it lies within
    2^-11 (fp16; bf16 2^-8) of (|C| + |w|) of the exact (u - z) s."""
    import numpy as np

    from cute_kernels.weight_only.formats import AWQ_ONE_FMA, BF16, F16

    from . import weight_only_simt as simt

    ct = F16 if x_dtype == torch.float16 else BF16
    e = AWQ_ONE_FMA.exponent(ct, max_scale)
    assert e == (0 if max_scale < 0.25 else {0.3: 1, 3.0: 4, 500.0: 11}[max_scale])
    scales, zeros, words, codes = _awq_fma_case(max_scale, x_dtype)
    staged = wgmma.param_words("awq_fma", scales, zeros, x_dtype)
    assert staged.scale_exponent == e  # what WgmmaPlan multiplies the scalar with (2^e)
    assert staged.shape == (1, 32)  # one word per (row, group): S in the low half, C in the high half
    halves = staged.view(torch.int16).view(32, 2).view(x_dtype).double()  # [row, half]
    s, z = scales.double()[:, 0], zeros.double()[:, 0]
    shift = {torch.float16: 24 - 6, torch.bfloat16: 133 - 3}[x_dtype] - e
    assert torch.equal(halves[:, 0], s * 2.0 ** shift)
    assert torch.equal(halves[:, 1], (-z * s * 2.0 ** -e).to(x_dtype).double())
    exact = (codes - zeros.to(torch.int64)).double() * s[:, None]
    c = halves[:, 1]
    eps = 2.0 ** (-11 if x_dtype == torch.float16 else -8)
    with simt.emulated(simt.Memory()):
        ctx = AWQ_ONE_FMA.group_ctx_words(ct, [simt.u32(staged[0].numpy())])
        for q in range(4):
            lo, hi = simt._halves(AWQ_ONE_FMA.decode_pair(simt.u32(words.numpy()), q, ct, ctx), ct.x2)
            for half, el in zip((lo, hi), AWQ_ONE_FMA.pair_elems(q)):
                expect = (codes[:, el].double() * s * 2.0 ** -e + c).to(x_dtype).double()
                assert np.array_equal(half, expect.numpy()), (q, el)
                err = np.abs(half * 2.0 ** e - exact[:, el].numpy())
                bound = eps * (np.abs(c.numpy()) + np.abs(half)) * 2.0 ** e
                assert (err <= bound).all(), (q, el, (err / np.abs(s.numpy())).max())


@pytest.mark.parametrize("x_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("max_scale", [0.01, 0.2, 0.3, 3.0, float("nan")])
def test_int4_one_fma_decodes_the_exact_values(x_dtype, max_scale):
    """int4_fma (signed int4 with group scales on the WGMMA path): one staged word S = s 2^(E - j - e) per (row, group),
    C = -8 s 2^-e derived in the kernel, and the decode of every pair is, times 2^e, bit for bit the exact format's:
    the scale rounded to x's dtype times the code, rounded once (a NaN scale gives NaN in its row, as there; e follows
    the finite scales)."""
    import numpy as np

    from cute_kernels.weight_only.formats import BF16, F16, INT4_ONE_FMA, format_by_key

    from . import weight_only_simt as simt

    ct = F16 if x_dtype == torch.float16 else BF16
    scales, _, words, codes = _awq_fma_case(3.0 if max_scale != max_scale else max_scale, x_dtype, seed=3)
    if max_scale != max_scale:
        scales[5, 0] = float("nan")
    staged = wgmma.param_words("int4_fma", scales, None, x_dtype)
    e = staged.scale_exponent
    assert staged.shape == (1, 32) and e == INT4_ONE_FMA.exponent(ct, 3.0 if max_scale != max_scale else max_scale)
    exact_fmt = format_by_key("int4")
    exact_words = wgmma.param_words("int4", scales, None, x_dtype)
    with simt.emulated(simt.Memory()):
        ctx = INT4_ONE_FMA.group_ctx_words(ct, [simt.u32(staged[0].numpy())])
        exact_ctx = exact_fmt.group_ctx_words(ct, [simt.u32(exact_words[0].numpy())])
        w = simt.u32(words.numpy())
        for q in range(4):
            got = simt._halves(INT4_ONE_FMA.decode_pair(w, q, ct, ctx), ct.x2)
            want = simt._halves(exact_fmt.decode_pair(exact_fmt.prepare_word(w, ct), q, ct, exact_ctx), ct.x2)
            for g, h in zip(got, want):
                assert np.array_equal(g * 2.0 ** e, h, equal_nan=True), q


def test_awq_format_choice(monkeypatch):
    """Which AWQ format the WGMMA path runs (``wgmma.awq_format``) and the decode path (``awq.decode_format``)."""
    from types import SimpleNamespace

    from cute_kernels.weight_only import awq

    small, large = SimpleNamespace(max_abs_scale=0.1, group=128), SimpleNamespace(max_abs_scale=0.6, group=128)
    nan = SimpleNamespace(max_abs_scale=float("inf"), group=128)  # repack maps NaN scales to inf
    assert wgmma.awq_format(torch.float16, small, 1) == "awq_fma"
    assert wgmma.awq_format(torch.float16, small, wgmma.AWQ_ONE_FMA_MAX_M) == "awq_fma"
    assert wgmma.awq_format(torch.float16, large, 16) == "awq_fma"  # e = 2, applied through the parameter words
    assert wgmma.awq_format(torch.float16, small, wgmma.AWQ_ONE_FMA_MAX_M + 1) == "awq"
    assert wgmma.awq_format(torch.bfloat16, small, 16) == "awq"
    assert wgmma.awq_format(torch.float16, nan, 16) == "awq"
    assert wgmma.signed_format(4, True, 1) == "int4_fma" == wgmma.signed_format(4, True, wgmma.INT4_ONE_FMA_MAX_M)
    assert wgmma.signed_format(4, True, wgmma.INT4_ONE_FMA_MAX_M + 1) == "int4"
    assert [wgmma.signed_format(b, g, 16) for b, g in ((4, False), (2, True), (8, True))] == ["int4", "int2", "int8"]
    monkeypatch.setattr(config, "AWQ_PARAM_WORDS_WARPS_N", None)  # (fp16's words: test_awq_param_words_rule_...)
    one_column = config.decode_tile("awq", 4, 4096, 132, k=4096)  # warps_n = 1: the scale folds into the weight
    side_by_side = config.decode_tile("awq", 4, 14336, 132, k=4096)  # warps_n > 1: promoted scales
    assert one_column.warps_n == 1 and side_by_side.warps_n > 1
    assert awq.decode_format("decode", torch.float16, small, one_column) == "awq_fma"
    assert awq.decode_format("decode", torch.float16, large, one_column) == "awq"  # e > 0: exact format
    assert awq.decode_format("decode", torch.float16, nan, one_column) == "awq"
    assert awq.decode_format("decode", torch.bfloat16, small, one_column) == "awq"
    assert awq.decode_format("decode", torch.float16, small, side_by_side) == "awq_zmma"  # session 52
    assert awq.decode_format("decode", torch.float16, large, side_by_side) == "awq_zmma"  # exact in any scale range
    assert side_by_side.stages > 0  # the ring: bf16 keeps awq there, the register tile of 8192^2 takes awq_zmma
    assert awq.decode_format("decode", torch.bfloat16, small, side_by_side) == "awq"
    register = config.decode_tile("awq", 4, 8192, 132, k=8192)
    assert register.stages == 0 and register.warps_n > 1
    assert awq.decode_format("decode", torch.bfloat16, small, register) == "awq_zmma"
    g64 = SimpleNamespace(max_abs_scale=0.1, group=64)  # K steps across groups: nothing to promote, the fold
    assert awq.decode_format("decode", torch.float16, g64, side_by_side) == "awq_fma"
    assert awq.decode_format("tensor_core", torch.float16, small, config.tensor_core_tile(32, True, "awq")) == "awq"


def test_awq_zero_mma_long_k_entry():
    """config.awq_zero_mma_decode_first (session 52): AWQ at <= 4 tokens on the long-K layers whose decode tile
    has two warps side by side on the register pipeline (8192^2, 7168 x 8192) goes back to the decode path; not at 5
    tokens, not the layers whose decode grid is one CTA per SM or one warp across, not K below the cluster entry."""
    first = config.awq_zero_mma_decode_first
    assert first(1, 8192, 8192, 132) and first(4, 7168, 8192, 132)
    assert not first(5, 8192, 8192, 132)
    assert not first(1, 8192, 4096, 132)  # K < WGMMA_CLUSTER_LONG_K: the decode path already
    assert not first(1, 6144, 8192, 132) and not first(1, 8192, 14336, 132)  # one CTA per SM
    assert not first(1, 4096, 8192, 132)  # one warp across
    for m in (1, 4):
        assert config.select_tile(4, m, 8192, 132, scaled=True, awq=True, k=8192, wgmma=True)[0] == "wgmma"


def test_awq_swapped_decode_entry():
    """config.awq_swapped_decode_first (session 53): AWQ at 6-7 tokens (fp16) / 6-8 (bf16) takes the decode path
    where its tile is a swapped register tile for every AWQ format (one warp across with >= 8 K steps a warp, or
    awq_zmma's two warps side by side) - 4096 x 14336 and 8192 x 4096 among the measured, 3584 x 14336 among the
    held out - but not on the cluster-split long-K layers (8192^2), not where the tile is the ring (14336 x 4096) or
    one CTA per SM (9216 x 4096), not above the dtype's count, not for fp32 x or without a dtype."""
    def path(m, n, k, dt):
        return config.awq_select_tile(m, n, k, 132, wgmma=True, x_dtype=dt)[0]

    for n, k in ((4096, 14336), (4096, 11008), (8192, 4096), (7168, 5120), (3584, 14336)):
        assert config.select_tile(4, 7, n, 132, scaled=True, awq=True, k=k, wgmma=True)[0] == "wgmma", (n, k)
        assert [path(m, n, k, torch.float16) for m in (6, 7, 8)] == ["decode", "decode", "wgmma"], (n, k)
        assert [path(m, n, k, torch.bfloat16) for m in (6, 7, 8, 9)] == ["decode"] * 3 + ["wgmma"], (n, k)
        assert path(7, n, k, torch.float32) == path(7, n, k, None) == "wgmma"
    for n, k in ((8192, 8192), (7168, 8192), (14336, 4096), (9216, 4096)):
        assert path(6, n, k, torch.bfloat16) == "wgmma", (n, k)
    assert config.awq_select_tile(7, 4096, 14336, 132, path="wgmma", wgmma=True, x_dtype=torch.float16)[0] == "wgmma"


def test_param_cache_follows_its_tensors():
    import gc

    wgmma.clear_cache()
    scales = torch.rand(64, 4, dtype=torch.float16)
    zeros = torch.randint(0, 16, (64, 4), dtype=torch.uint8)
    a = wgmma.cached_params("awq", scales, zeros, torch.float16)
    assert wgmma.cached_params("awq", scales, zeros, torch.float16) is a
    zeros.add_(1)  # an update of either tensor misses
    b = wgmma.cached_params("awq", scales, zeros, torch.float16)
    assert b is not a and torch.equal(b, wgmma.param_words("awq", scales, zeros, torch.float16))
    assert wgmma.cached_params("awq", scales, zeros, torch.bfloat16) is not b  # the rounding target is in the key
    del scales, a, b
    gc.collect()
    assert not wgmma._params


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_codes_from_packed_match_the_packing(bits):
    lo, hi = {1: (-1, 1), 2: (-2, 1), 4: (-8, 7), 8: (-128, 127)}[bits]
    w = torch.randint(lo, hi + 1, (24, 96))
    if bits == 1:
        w = torch.where(w >= 0, 1, -1)
    codes = wgmma.codes_from_packed(pack_weights(w, bits), bits, 96)
    expected = {1: (w > 0).to(torch.uint8), 2: (w + 2).to(torch.uint8), 4: (w & 15).to(torch.uint8),
                8: (w & 255).to(torch.uint8)}[bits]
    assert torch.equal(codes, expected)


def test_fragment_order_is_the_wgmma_a_fragment():
    """The blob puts pair P = 4 * kb + p of a thread at (row, K) = the DSL's own register-sourced WGMMA A fragment
    coordinates of register p of k-block kb (bf16, 64-row atom; two atoms = two consumer warpgroups)."""
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass.cute.nvgpu import OperandMajorMode, warpgroup

    coords = {}

    @cute.jit
    def trace():
        tiled = sm90_utils.make_trivial_tiled_mma(
            cutlass.BFloat16, cutlass.BFloat16, OperandMajorMode.K, OperandMajorMode.K, cutlass.Float32, (2, 1, 1),
            tiler_mn=(64, 64), a_source=warpgroup.OperandSource.RMEM)
        ident = cute.make_identity_tensor((128, 64))
        for t in (0, 1, 5, 33, 70, 127, 128, 200):
            part = tiled.get_slice(t).partition_A(ident)
            coords[t] = [part[v + 8 * kb] for kb in range(4) for v in range(8)]  # flat: ((2,2,2),1,4)

    cute.compile(trace)
    index, epw = wgmma._fragment_index(4, "int4")  # [thread][word = k-block][element]; pair p = elements p, p + 4
    for t, cs in coords.items():
        wg, tw = divmod(t, 128)
        for kb in range(4):
            for p in range(4):
                for half in range(2):
                    row, col = cs[kb * 8 + 2 * p + half]  # register p holds values 2p (low half), 2p + 1
                    flat = index[tw * 4 * epw + kb * epw + p + 4 * half]
                    assert (row - 64 * wg, col) == divmod(flat, 64), (t, kb, p, half)


def test_select_config_and_shipped_configs():
    cfg = wgmma.select_config(40, 4096, 4096, 132)
    assert (cfg.tile_m, cfg.tile_n) == (128, 64) and cfg.split_k == 4  # 32 tiles: 4 K slices fill 128 SMs
    assert wgmma.select_config(17, 14336, 4096, 132).split_k == 1  # 112 tiles: one wave already
    assert wgmma.select_config(1000, 8192, 8192, 132).tile_n == 256
    assert wgmma.select_config(1, 8192, 8192, 132).tile_n == 16  # 1-16 tokens: 16-token tiles
    # layers below WGMMA_LARGE_LAYER weights at <= 32 tokens: 64-row tiles, two CTAs per SM (264 slots: 64 row
    # tiles x 4 K slices)
    small = wgmma.select_config(16, 4096, 4096, 132)
    assert (small.tile_m, small.tile_n, small.ctas_per_sm, small.split_k) == (64, 16, 2, 4)
    assert wgmma.select_config(32, 4096, 4096, 132).ctas_per_sm == 2
    assert wgmma.select_config(16, 8192, 8192, 132).ctas_per_sm == 1  # 2^26 weights: the 128-row tile
    assert wgmma.select_config(16, 4096, config.WGMMA_LARGE_LAYER // 4096, 132).tile_m == 128
    shipped = wgmma.shipped_configs()
    for m, n, k in ((17, 4096, 4096), (200, 14336, 4096), (1000, 8192, 8192), (8, 4096, 4096), (24, 1024, 4096)):
        c = wgmma.select_config(m, n, k, 132)
        assert replace(c, split_k=1 if c.split_k == 1 else wgmma.MAX_SPLIT_K) in shipped


def test_large_m_tiles_and_splits():
    """Above 128 tokens the tile width and K split come from ``large_m_cost``, whose per-K-tile and fix-up costs were
    fitted on the H100 (session 21): the choices it makes on the measured points."""
    def choice(m, n, k):
        c = wgmma.select_config(m, n, k, 132)
        return c.tile_m, c.tile_n, c.split_k

    assert choice(1024, 14336, 4096) == (128, 256, 1)  # the wave model's two slices measured 23% slower
    assert choice(256, 6144, 4096) == (128, 128, 1)  # 96 unsplit 128-token tiles beat 48 256-token ones split in two
    assert choice(1024, 8192, 8192) == (128, 256, 1)
    assert choice(256, 4096, 14336) == (128, 256, 4)  # 32 tiles: the split is what fills the SMs
    assert choice(129, 4096, 4096)[2] > 1
    # the model: a split adds a fix-up per round and divides the K-tiles; more tiles than SMs add rounds
    assert wgmma.large_m_cost(1024, 14336, 4096, 256, 2, 132) > wgmma.large_m_cost(1024, 14336, 4096, 256, 1, 132)
    assert wgmma.large_m_cost(256, 4096, 14336, 256, 4, 132) < wgmma.large_m_cost(256, 4096, 14336, 256, 1, 132)


def test_x_rows():
    """x is padded to whole token tiles (``x_rows``) when >= 96 rows of the last one would lie past x's end and there
    is one token tile, or two of 256 tokens; otherwise the kernel moves its last tile back instead (no copy)."""
    assert wgmma.x_rows(1, 128) == 128 and wgmma.x_rows(129, 256) == 256 and wgmma.x_rows(20, 128) == 128
    assert wgmma.x_rows(300, 256) == 512 and wgmma.x_rows(257, 256) == 512  # two 256-token tiles
    assert wgmma.x_rows(40, 128) == 40 and wgmma.x_rows(420, 256) == 420  # 88 / 92 rows past the end
    assert wgmma.x_rows(1, 16) == 1 and wgmma.x_rows(17, 32) == 17  # narrow tiles: never 96 rows
    assert wgmma.x_rows(129, 128) == 129 and wgmma.x_rows(160, 128) == 160  # two 128-token tiles: moved
    assert wgmma.x_rows(1100, 256) == 1100 and wgmma.x_rows(257, 128) == 257  # three or more tiles
    assert wgmma.x_rows(256, 128) == 256  # whole tiles


def test_dispatch_rule(monkeypatch):
    # quantized_mm with a dense path: WGMMA from WGMMA_MIN_M tokens (WGMMA_MIN_M_GROUPED with group scales or for
    # AWQ) to WGMMA_MAX_M, dense above
    top = config.WGMMA_MAX_M
    # (AWQ: a small layer whose decode grid is one wave of side-by-side warps, outside session 46's entries below)
    for table, kw, n, k in ((config.WGMMA_MIN_M, {}, 4096, 4096),
                            (config.WGMMA_MIN_M_GROUPED, {"scaled": True}, 4096, 4096),
                            ({4: config.WGMMA_MIN_M_GROUPED[4]}, {"scaled": True, "awq": True}, 8192, 2048)):
        for bits, first in table.items():
            assert 2 <= first <= config.DECODE_MAX_M
            assert config.select_tile(bits, first - 1, n, 132, dense=True, wgmma=True, k=k, **kw)[0] == "decode"
            assert config.select_tile(bits, first, n, 132, dense=True, wgmma=True, k=k, **kw)[0] == "wgmma"
            assert config.select_tile(bits, first, n, 132, dense=True, wgmma=False, k=k, **kw)[0] == "decode"
    # large layers (>= WGMMA_LARGE_LAYER weights) with group parameters switch at WGMMA_MIN_M_GROUPED_LARGE (AWQ:
    # WGMMA_MIN_M_AWQ_LARGE, session 34)
    n, k = 8192, config.WGMMA_LARGE_LAYER // 8192
    for bits, grouped_first in config.WGMMA_MIN_M_GROUPED_LARGE.items():
        for kw in ({"scaled": True},) + (({"scaled": True, "awq": True},) if bits == 4 else ()):  # AWQ: 4-bit
            first = config.WGMMA_MIN_M_AWQ_LARGE if kw.get("awq") else grouped_first
            assert first < config.WGMMA_MIN_M_GROUPED[bits]
            if first > 1:
                assert config.select_tile(bits, first - 1, n, 132, dense=True, wgmma=True, k=k, **kw)[0] == "decode"
            assert config.select_tile(bits, first, n, 132, dense=True, wgmma=True, k=k, **kw)[0] == "wgmma"
            assert config.select_tile(bits, first, n, 132, dense=True, wgmma=True, k=k - 64, **kw)[0] == "decode"
        # without group parameters large layers switch at WGMMA_MIN_M_LARGE (1/2-bit, session 31) or as small ones
        plain = config.WGMMA_MIN_M_LARGE.get(bits, config.WGMMA_MIN_M[bits])
        assert plain <= config.WGMMA_MIN_M[bits]
        if plain > 1:
            assert config.select_tile(bits, plain - 1, n, 132, dense=True, wgmma=True, k=k)[0] == "decode"
        assert config.select_tile(bits, plain, n, 132, dense=True, wgmma=True, k=k)[0] == "wgmma"
        assert config.select_tile(bits, plain, n, 132, dense=True, wgmma=True, k=k - 64)[0] == (
            "wgmma" if plain == config.WGMMA_MIN_M[bits] else "decode")
    assert set(config.WGMMA_MIN_M_LARGE) == {1, 2}
    # grouped 4-bit on long-K layers whose plan reduces its K slices in clusters: from one token (AWQ; int4 with group
    # scales where the clusters fill the SMs) - session 32
    def first_wgmma(bits, n, k, **kw):  # the fewest tokens the dispatch sends to the WGMMA path
        kw = {"dense": not kw.get("awq"), **kw}
        return next(m for m in range(1, 17) if config.select_tile(bits, m, n, 132, wgmma=True, k=k, **kw)[0] == "wgmma")

    assert config.WGMMA_MIN_M_GROUPED_LARGE[4] == 1 and config.WGMMA_MIN_M_AWQ_LARGE == 6  # session 34
    assert wgmma.cluster_split_ctas(8192, 8192, 132) == 128 and wgmma.cluster_split_ctas(7168, 8192, 132) == 112
    assert wgmma.cluster_split_ctas(4096, 14336, 132) == 0 and wgmma.cluster_split_ctas(14336, 4096, 132) == 0
    for (n, k), awq_first, int4g_first in (((8192, 8192), 1, 1), ((8192, 28672), 1, 1), ((7168, 8192), 1, 1),
                                           ((8192, 4096), 6, 1), ((4096, 14336), 7, 1), ((14336, 4096), 6, 1),
                                           ((4096, 4096), 9, 8)):  # 7 and 9: session 46's entries, below
        got = (first_wgmma(4, n, k, scaled=True, awq=True), first_wgmma(4, n, k, scaled=True))
        assert got == (awq_first, int4g_first), (n, k)
    # session 46: AWQ on layers whose decode grid (16-row CTAs) is one wave - small ones with K <= 8192 from 9 tokens,
    # large ones that fill >= 0.95 of the wave from 7 - and on small layers whose decode grid is more than one wave
    # from one token; not for the blob's decode tiles (AWQ_ONE_COPY), not for int4 g128
    assert config.WGMMA_MIN_M_AWQ_SMALL == 9 and config.WGMMA_MIN_M_AWQ_FULL_DECODE_WAVE == 7
    assert config.WGMMA_MIN_M_AWQ_MULTI_WAVE_DECODE == 1
    for (n, k), first in (((4096, 4096), 9), ((3584, 3584), 9), ((2048, 8192), 9), ((1024, 4096), 9),
                          ((1536, 8960), 8), ((8192, 2048), 8), ((7168, 2048), 8), ((2560, 10240), 8),
                          ((6144, 2048), 1), ((5120, 3072), 1), ((5120, 5120), 1), ((4608, 4096), 1),
                          ((4096, 11008), 7), ((4096, 8192), 7), ((4096, 28672), 7), ((3840, 15360), 6),
                          ((3584, 18944), 6), ((14336, 4096), 6), ((8192, 4096), 6)):
        assert first_wgmma(4, n, k, scaled=True, awq=True) == first, (n, k)
        old_first = config.WGMMA_MIN_M_AWQ_LARGE if n * k >= config.WGMMA_LARGE_LAYER else 8
        assert first_wgmma(4, n, k, scaled=True, awq=True, blob_reader=True) == old_first, (n, k)
        with monkeypatch.context() as mp:
            for entry in ("WGMMA_MIN_M_AWQ_SMALL", "WGMMA_MIN_M_AWQ_FULL_DECODE_WAVE",
                          "WGMMA_MIN_M_AWQ_MULTI_WAVE_DECODE"):
                mp.setattr(config, entry, None)
            assert first_wgmma(4, n, k, scaled=True, awq=True) == old_first, (n, k)
    # session 48: short-K small layers (K <= 2048, N * K <= 3072 * 2048) keep the decode tiles through 16 tokens
    def paths(n, k, **kw):
        return [config.select_tile(4, m, n, 132, wgmma=True, k=k, scaled=True, awq=True, **kw)[0] for m in range(1, 18)]

    for n, k in ((2048, 2048), (3072, 2048), (512, 2048), (4096, 1024), (4096, 1536), (1024, 1024)):
        assert paths(n, k) == ["decode"] * 16 + ["wgmma"], (n, k)
        with monkeypatch.context() as mp:
            mp.setattr(config, "WGMMA_AWQ_SHORT_MAX_K", None)
            assert paths(n, k).index("wgmma") == 8, (n, k)
        assert paths(n, k, blob_reader=True).index("wgmma") == 7, (n, k)  # not for the blob's decode tiles
    for n, k in ((4096, 2048), (3584, 2048), (1024, 4096), (2048, 4096)):  # past the bounds: from 9, as before
        assert paths(n, k).index("wgmma") == 8, (n, k)
    assert first_wgmma(4, 2048, 2048, scaled=True) == config.WGMMA_MIN_M_GROUPED[4]  # int4 g128: unchanged
    assert config.awq_decode_multi_wave(5120, 3072, 132) and not config.awq_decode_multi_wave(8192, 2048, 132)
    assert config.awq_decode_full_wave(4096, 132) and not config.awq_decode_full_wave(3840, 132)
    assert not config.awq_decode_full_wave(4240, 132) and config.awq_decode_full_wave(4224, 132)
    assert first_wgmma(4, 4096, 4096, scaled=True) == config.WGMMA_MIN_M_GROUPED[4]  # int4 g128: unchanged
    # no group parameters: unchanged by it
    assert config.select_tile(4, 1, 8192, 132, dense=True, wgmma=True, k=8192)[0] == "decode"
    # unscaled 2-bit on large layers whose WGMMA tiles need no K split: from one token (session 32); split ones from 4
    assert config.WGMMA_MIN_M_LARGE_UNSPLIT == {2: 1}
    for (n, k), first in (((14336, 4096), 1), ((16384, 2048), 1), ((28672, 8192), 1), ((8192, 8192), 4),
                          ((9216, 4096), 4), ((4096, 14336), 4), ((4096, 4096), 8)):
        assert wgmma.splits_k(n, k, 132) == (first != 1) or n * k < config.WGMMA_LARGE_LAYER
        assert first_wgmma(2, n, k) == first, (n, k)
    # where splitting every tile would make more than SPLIT_MAX_WAVES waves of units, the full waves run whole tiles
    # and the last wave is split (session 32); no tail: whole tiles
    assert wgmma.select_config(1, 9216, 4096).split_k == 3  # 1.6 waves of split units: unchanged
    assert (wgmma.select_config(1, 12288, 4096).split_k, wgmma.select_config(1, 12288, 4096).split_tail) == (1, 1)
    tail_cfg = wgmma.select_config(1, 22016, 4096)
    assert (tail_cfg.split_k, tail_cfg.split_tail) == (1, 3)
    run_cfg, options, split = wgmma.launch_variant(4, tail_cfg, 132, 1, 22016, 4096)
    assert run_cfg.split_k == 3 and split == (3, 40 * 3 * 128 * 16, 40, 132)  # 172 tiles: 132 whole, 40 in 3 slices
    assert dict(options).get("weight_preload") == 4  # the split 16-token tiles' stage options
    # those layers (wgmma.many_waves) take their own entries (session 33): 1/2-bit weights from one token; since
    # session 34 grouped 4-bit and AWQ from one token too (AWQ's full-wave entry is then moot); unscaled 4-bit the
    # small layers' entry; with the tables off (None), the small layers' entries throughout
    assert wgmma.many_waves(22016, 4096, 132) and wgmma.many_waves(12288, 4096, 132)
    assert not wgmma.many_waves(9216, 4096, 132) and not wgmma.many_waves(14336, 4096, 132)
    assert not wgmma.many_waves(8192, 8192, 132) and not wgmma.many_waves(4096, 4096, 132)
    cases = ((1, {}, 1, config.WGMMA_MIN_M[1]), (2, {}, 1, config.WGMMA_MIN_M[2]),
             (4, {}, config.WGMMA_MIN_M[4], config.WGMMA_MIN_M[4]),
             (1, {"scaled": True}, 1, config.WGMMA_MIN_M_GROUPED[1]),
             (2, {"scaled": True}, 1, config.WGMMA_MIN_M_GROUPED[2]),
             (4, {"scaled": True}, 1, config.WGMMA_MIN_M_GROUPED[4]),
             (4, {"scaled": True, "awq": True}, 1, config.WGMMA_MIN_M_GROUPED[4]))
    for n, k in ((12288, 4096), (22016, 4096), (24576, 1536), (18944, 3584)):
        full = wgmma.full_wave(n, k, 132)  # >= 132 tiles of 128 rows: AWQ from one token there
        assert full == (n != 12288), (n, k)
        for bits, kw, first, small in cases:
            if kw.get("awq") and full:
                first = config.WGMMA_MIN_M_AWQ_FULL_WAVE
            assert first_wgmma(bits, n, k, **kw) == first, (n, k, bits, kw)
            with monkeypatch.context() as mp:
                for table in ("WGMMA_MIN_M_MANY_WAVES", "WGMMA_MIN_M_GROUPED_MANY_WAVES", "WGMMA_MIN_M_AWQ_MANY_WAVES",
                              "WGMMA_MIN_M_AWQ_FULL_WAVE"):
                    mp.setattr(config, table, None)
                assert first_wgmma(bits, n, k, **kw) == small, (n, k, bits, kw)
    assert config.select_tile(1, 1, 8192, 132, dense=True, wgmma=True, k=8192)[0] == "wgmma"  # 1-bit: as before
    assert config.select_tile(4, 1, 14336, 132, dense=True, wgmma=True, k=4096)[0] == "decode"  # 4-bit: as before
    # 8-bit: the decode path up to DECODE_MAX_M (no WGMMA_MIN_M entry), then WGMMA like the other widths
    assert config.select_tile(8, 16, 8192, 132, dense=True, wgmma=True, k=8192)[0] == "decode"
    assert config.select_tile(8, 17, 8192, 132, dense=True, wgmma=True, k=8192)[0] == "wgmma"
    assert config.select_tile(8, 1024, 8192, 132, dense=True, wgmma=True, k=8192)[0] == "wgmma"
    # a caller's decode_max_m keeps the decode path up to it
    assert config.select_tile(4, 16, 8192, 132, decode_max_m=16, dense=True, wgmma=True, k=8192)[0] == "decode"
    assert config.select_tile(4, 17, 8192, 132, dense=True, wgmma=True, k=8192)[0] == "wgmma"
    assert config.select_tile(4, top, 4096, 132, dense=True, wgmma=True, k=4096)[0] == "wgmma"
    assert config.select_tile(4, top + 1, 4096, 132, dense=True, wgmma=True, k=4096)[0] == "dense"
    # the fused AWQ GEMM has no dense path: WGMMA at every M above the decode path
    assert config.select_tile(4, 2 * top, 4096, 132, scaled=True, awq=True, k=4096, wgmma=True)[0] == "wgmma"
    # not eligible: as before
    assert config.select_tile(4, 64, 4096, 132, dense=True, k=4096)[0] == "tensor_core"
    with pytest.raises(ValueError, match="path='wgmma' is not available"):
        config.select_tile(4, 64, 4096, 132, path="wgmma", k=4096)
    assert config.awq_dense_min_tokens(8192, wgmma=True) == top + 1
    assert config.awq_dense_min_tokens(4096) == config.DECODE_MAX_M + 1  # without the WGMMA path: unchanged


def test_eligible():
    x = torch.empty(32, 4096, dtype=torch.bfloat16)
    assert wgmma.eligible(x, 4, 4096, 4096, 128, torch.bfloat16, "sm_90a")
    assert wgmma.eligible(x, 1, 4096, 4096, None, torch.bfloat16, "sm_90a")
    assert not wgmma.eligible(x, 4, 4096, 4096, 128, torch.bfloat16, "sm_80")  # no WGMMA before SM90
    assert wgmma.eligible(x, 8, 4096, 4096, None, torch.bfloat16, "sm_90a")
    assert not wgmma.eligible(x.float(), 4, 4096, 4096, None, torch.float32, "sm_90a")
    assert not wgmma.eligible(x, 4, 4096, 4096, None, torch.float32, "sm_90a")  # out dtype != x dtype
    assert not wgmma.eligible(x, 4, 4092, 4096, None, torch.bfloat16, "sm_90a")  # N % 8
    assert not wgmma.eligible(x, 4, 4096, 4096, 96, torch.bfloat16, "sm_90a")  # group straddles K-tiles


_LARGE = (8192, 8192)  # a layer that gets ``wgmma.stage_options`` on 32/64-token tiles
COMPILED = [("int4", 4, torch.bfloat16, torch.bfloat16, 128, t, s, None) for t in wgmma.TILE_N_CHOICES
            for s in (1, 8)] + [
    ("int4", 4, torch.float16, None, 64, 64, 8, None), ("int4", 4, torch.bfloat16, torch.float32, 32, 64, 1, None),
    ("awq", 4, torch.float16, torch.float16, 128, 64, 8, None),
    ("awq", 4, torch.bfloat16, torch.bfloat16, 64, 256, 1, None),
    ("int2", 2, torch.bfloat16, None, 64, 128, 8, None), ("int1", 1, torch.float16, torch.float16, 128, 32, 1, None),
    ("int8", 8, torch.bfloat16, None, 64, 128, 1, None), ("int8", 8, torch.bfloat16, torch.float32, 128, 256, 8, None),
    ("int8", 8, torch.float16, torch.float16, 64, 16, 8, None),
    ("awq", 4, torch.float16, torch.float16, 128, 32, 8, _LARGE), ("int4", 4, torch.bfloat16, None, 64, 64, 1, _LARGE),
    ("int4", 4, torch.bfloat16, torch.bfloat16, 64, 64, 8, _LARGE),
    ("awq_fma", 4, torch.float16, torch.float16, 128, 16, 8, None),
    ("awq_fma", 4, torch.float16, torch.float16, 128, 256, 1, None),
    ("awq_fma", 4, torch.float16, torch.float16, 128, 32, 8, _LARGE),
    ("int4_fma", 4, torch.bfloat16, torch.bfloat16, 128, 16, 8, None),
    ("int4_fma", 4, torch.float16, torch.float32, 128, 128, 1, None)]


@pytest.mark.slow
@pytest.mark.parametrize("fmt_key,bits,x_dtype,scale_dtype,group,tile_n,split,layer", COMPILED)
def test_compiles_with_register_sourced_hgmma(fmt_key, bits, x_dtype, scale_dtype, group, tile_n, split, layer):
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    cfg = TileConfig(tile_m=128, tile_n=tile_n, cluster_m=1, cluster_n=1, split_k=split)
    options = dict(wgmma.stage_options(bits, cfg, *layer)) if layer else {}
    assert bool(options) == bool(layer)  # the large-layer rows do run with two K-tiles per stage
    compiled = compile_with_artifacts(
        lambda o: wgmma.build(fmt_key, x_dtype, x_dtype, scale_dtype is not None, group, cfg, extra_options=o,
                              kernel_options=options))
    s = summarize_cubin(compiled.artifacts.CUBIN)
    suffix = "BF16" if x_dtype == torch.bfloat16 else ""
    hgmma = [op for op in s.mma if op.startswith(f"HGMMA.64x{tile_n}x16.F32") and op.endswith(suffix)]
    assert hgmma, dict(s.mma)
    # A from registers: every HGMMA reads its A operand from a register, B from a shared-memory descriptor
    lines = [ln for ln in s.text.splitlines() if "HGMMA" in ln]
    assert lines and all("gdesc" in ln and ", R" in ln.split("HGMMA")[1] for ln in lines), lines[:2]
    assert s.local_memory_ops == 0


@pytest.mark.slow
@pytest.mark.parametrize("fmt_key,bits,scale_dtype,tile_n,split", [
    ("awq", 4, torch.float16, 16, 8), ("awq_fma", 4, torch.float16, 16, 8), ("int4", 4, torch.bfloat16, 32, 1),
    ("int1", 1, None, 16, 8)])
def test_small_layer_tile_two_ctas_per_sm(fmt_key, bits, scale_dtype, tile_n, split):
    """The small-layer tile (64 rows, one consumer warpgroup, two CTAs per SM): 128 registers per thread at launch
    (two 256-thread CTAs fill the register file), the consumers raised to 232 with setmaxnreg, shared memory within
    half the SM's, no spills, and the WGMMAs not serialized (ptxas inserts a WARPGROUP.DEPBAR after every HGMMA
    when the consumers' registers are too few for the fragments in flight, as with two 128-row CTAs)."""
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin
    from cute_kernels.sm90.gemm import SM90_SMEM_PER_SM

    x_dtype = torch.float16 if fmt_key.startswith("awq") else torch.bfloat16
    cfg = TileConfig(tile_m=64, tile_n=tile_n, cluster_m=1, cluster_n=1, split_k=split, ctas_per_sm=2)
    assert cfg in wgmma.shipped_configs()
    compiled = compile_with_artifacts(
        lambda o: wgmma.build(fmt_key, x_dtype, x_dtype, scale_dtype is not None, 128 if scale_dtype else 64, cfg,
                              extra_options=o))
    s = summarize_cubin(compiled.artifacts.CUBIN)
    assert s.local_memory_ops == 0
    assert max(s.kernels.values()) == 128
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8" in s.text  # consumers: 232
    hgmma = sum(n for op, n in s.mma.items() if op.startswith(f"HGMMA.64x{tile_n}x16"))
    assert hgmma and s.text.count("WARPGROUP.DEPBAR") < hgmma
    from cute_kernels.epilogues import Accumulator, EpilogueTree
    from cute_kernels.sm90.weight_only_wgmma import WeightOnlyWgmmaSm90
    from cute_kernels.weight_only.formats import format_by_key

    kernel = WeightOnlyWgmmaSm90(cfg, EpilogueTree(Accumulator()), format_by_key(fmt_key), 128, True)
    assert kernel.smem_bytes == SM90_SMEM_PER_SM // 2 - 1024 and kernel.max_active_clusters == 264


@pytest.mark.slow
@pytest.mark.parametrize("cfg", wgmma.shipped_configs(), ids=lambda c: c.describe())
def test_no_shipped_config_serializes_its_wgmmas(cfg):
    """ptxas serializes register-sourced WGMMAs (a WARPGROUP.DEPBAR after every HGMMA: no spill, no warning in the
    build) when the consumers' registers cannot hold the accumulator and the A fragments in flight - as four fragments
    on 256-token tiles did from session 15 to 20 (13-32% slower at 256-1024 tokens). Every shipped config, for AWQ (the
    most decode-context registers) and 1-bit codes, with the large-layer stage options where they apply."""
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    for fmt_key, bits, scaled, group in (("awq", 4, True, 128), ("awq_fma", 4, True, 128),
                                         ("int1", 1, False, wgmma.NO_GROUP)):
        options = dict(wgmma.stage_options(bits, cfg, *_LARGE))
        compiled = compile_with_artifacts(
            lambda o: wgmma.build(fmt_key, torch.float16, torch.float16, scaled, group, cfg, extra_options=o,
                                  kernel_options=options))
        s = summarize_cubin(compiled.artifacts.CUBIN)
        hgmma = sum(s.mma.values())
        assert s.local_memory_ops == 0, (fmt_key, cfg)
        assert hgmma and s.text.count("WARPGROUP.DEPBAR") < hgmma, (fmt_key, cfg.describe(), dict(s.mma))


def test_kernel_options_are_checked():
    from cute_kernels.epilogues import Accumulator, EpilogueTree
    from cute_kernels.sm90.weight_only_wgmma import WeightOnlyWgmmaSm90
    from cute_kernels.weight_only.formats import format_by_key

    cfg = TileConfig(tile_m=128, tile_n=16, cluster_m=1, cluster_n=1)
    tree = EpilogueTree(Accumulator())
    assert WeightOnlyWgmmaSm90(cfg, tree, format_by_key("int1"), 64, False).kps == 2  # default: 2 K-tiles at 1/2 bits
    assert WeightOnlyWgmmaSm90(cfg, tree, format_by_key("int4"), 64, False).kps == 2  # 4-bit: 2 on 16-token tiles
    cfg64 = TileConfig(tile_m=128, tile_n=64, cluster_m=1, cluster_n=1)
    assert WeightOnlyWgmmaSm90(cfg64, tree, format_by_key("int4"), 64, False).kps == 1  # and 1 on wider ones
    assert WeightOnlyWgmmaSm90(cfg64, tree, format_by_key("int4"), 64, False).a_buffers == 4
    cfg256 = TileConfig(tile_m=128, tile_n=256, cluster_m=1, cluster_n=1)
    assert WeightOnlyWgmmaSm90(cfg256, tree, format_by_key("int4"), 64, False).a_buffers == 2  # registers
    assert WeightOnlyWgmmaSm90(cfg, tree, format_by_key("int4"), 64, False, k_tiles_per_stage=4).kps == 4
    with pytest.raises(ValueError, match="k_tiles_per_stage = 3"):
        WeightOnlyWgmmaSm90(cfg, tree, format_by_key("int4"), 64, False, k_tiles_per_stage=3)
    with pytest.raises(ValueError, match="a_buffers = 3"):
        WeightOnlyWgmmaSm90(cfg, tree, format_by_key("int2"), 64, False, a_buffers=3)


@pytest.mark.parametrize("kps", [1, 2, 4])
@pytest.mark.parametrize("a_buffers", [2, 4])
def test_stage_release_schedule(kps, a_buffers):
    """The mainloop's stage bookkeeping, walked in Python with the kernel's own predicates: per work tile of S stages
    (S * kps K-tiles, unrolled in rounds of max(a_buffers, kps) K-tiles, then the rest), every stage is
    waited for once, before its first K-tile, and released exactly once, in order, only after the WGMMAs of its last
    K-tile are done (wait_group(a_buffers - 1) after each K-tile) - the K-tile's group parameters are in the stage,
    so it must still be held when they are read; the A fragment a K-tile uses rotates with t itself (t mod a_buffers)
    in the rounds and in the rest alike, so a fragment is rewritten only a_buffers K-tiles after its last use, which
    the previous wait has completed."""
    from cute_kernels.sm90.weight_only_wgmma import releases_a_stage, stages_left_at_end

    unroll = max(a_buffers, kps)
    for stages in range(1, 13):
        tiles = stages * kps
        waited, released, last_use, completed = [], [], {}, -1
        for t in range(tiles):
            h = t % unroll  # main rounds and the remainder loop both index K-tiles by t mod unroll
            if h % kps == 0:
                waited.append(t // kps)
            assert waited[-1] == t // kps  # the K-tile reads the stage it waited for
            frag = h % a_buffers  # the kernel's frags[h % nf]
            assert frag not in last_use or last_use[frag] <= completed  # its previous K-tile's WGMMAs are done
            last_use[frag] = t
            done = t - (a_buffers - 1)  # K-tiles <= done have completed their WGMMAs after this K-tile's wait
            completed = done
            if releases_a_stage(h, a_buffers, kps) and t >= a_buffers - 1:
                stage = len(released)
                assert (stage + 1) * kps - 1 <= done  # its last K-tile is complete
                released.append(stage)
        released += list(range(len(released), len(released) + min(stages, stages_left_at_end(a_buffers, kps))))
        assert waited == list(range(stages))
        assert released == list(range(stages)), (stages, released)


def test_plan_memo_of_derived_operands():
    """``WgmmaPlan.derived_operands`` reuses the last call's blob / parameter words for the same tensors, rebuilds
    them after an in-place update, and keeps nothing alive (weak references only)."""
    import gc

    from cute_kernels.formats.awq import awq_quantize
    from cute_kernels.weight_only import awq_repack

    wgmma.clear_cache()
    q, z, s = awq_quantize(torch.randn(256, 512) * 0.05, 128, torch.float16)
    kw = awq_repack.kernel_weights(q, s, z, 128)
    plan = wgmma.WgmmaPlan("awq", 4, TileConfig(128, 16, 1, 1), 132)
    blob, params = plan.derived_operands(kw.w, kw.scales, kw.zeros, torch.float16, 256)
    again = plan.derived_operands(kw.w, kw.scales, kw.zeros, torch.float16, 256)
    assert again[0] is blob and again[1] is params
    kw.scales.mul_(2.0)  # in place: the parameter words are rebuilt, the blob is not
    blob2, params2 = plan.derived_operands(kw.w, kw.scales, kw.zeros, torch.float16, 256)
    assert blob2 is blob and params2 is not params
    assert torch.equal(params2, wgmma.param_words("awq", kw.scales, kw.zeros, torch.float16))
    other = kw.w.clone()  # another weight object with equal contents: its own blob
    assert plan.derived_operands(other, kw.scales, kw.zeros, torch.float16, 256)[0] is not blob
    del blob, params, again, blob2, params2
    gc.collect()
    blobs = len(wgmma._blobs)
    del other
    gc.collect()
    assert len(wgmma._blobs) == blobs - 1  # the plan's memo did not keep the clone's blob alive
    unscaled = torch.randint(0, 256, (128, 256), dtype=torch.uint8)
    plan4 = wgmma.WgmmaPlan("int4", 4, TileConfig(128, 16, 1, 1), 132)
    first = plan4.derived_operands(unscaled, None, None, torch.bfloat16, 512)
    assert first[1] is None and plan4.derived_operands(unscaled, None, None, torch.bfloat16, 512)[0] is first[0]


def test_stage_options_of_large_4bit_layers():
    """Two K-tiles per stage for 4-bit weights on 32/64-token tiles of large layers only (``wgmma.stage_options``),
    with the L2 warm-up in stages; the kernel's defaults elsewhere."""
    large_k = config.WGMMA_LARGE_LAYER // 8192
    cfg = {t: TileConfig(128, t, 1, 1) for t in (16, 32, 64, 128)}
    assert wgmma.stage_options(4, cfg[32], 8192, large_k) == (("k_tiles_per_stage", 2), ("l2_warmup", 4))
    assert wgmma.stage_options(4, cfg[64], 8192, large_k) == (("k_tiles_per_stage", 2), ("l2_warmup", 2))
    assert wgmma.stage_options(4, cfg[64], 8192, large_k - 64) == ()  # below the size
    assert wgmma.stage_options(4, cfg[16], 8192, large_k) == ()  # 16-token tiles: already the kernel's default
    assert wgmma.stage_options(4, cfg[128], 8192, large_k) == ()
    # 1/2-bit: 2 K-tiles per stage by default anyway; their first stages are preloaded (configs.WEIGHT_PRELOAD)
    assert wgmma.stage_options(2, cfg[64], 8192, large_k) == (("weight_preload", wgmma.PRELOAD_LOW_BIT_STAGES),)


def test_stages_fit_the_real_shared_storage():
    """The stage count's arithmetic leaves 1 KB for the barriers and alignment, but the shared storage also pads each
    region to its alignment and its whole size to 1 KB. For 1-bit codes with group scales (g128) on 32-token tiles
    with four K-tiles per stage (a kernel option, not a shipped default) it gave 10 stages = 233472 B > 232448 B,
    which a device refuses at launch; the kernel now drops to the stage count whose real size fits
    (``Sm90GemmKernel._setup``). Session 18 hit the same with 16-bit group parameters on a shipped config."""
    import re

    from cute_kernels.layouts import weight_only_wgmma_layouts
    from cute_kernels.sm90.gemm import SM90_SMEM_BYTES

    cfg = TileConfig(tile_m=128, tile_n=32, cluster_m=1, cluster_n=1)
    out = weight_only_wgmma_layouts("int1", True, 128, cfg, "BFloat16", (("k_tiles_per_stage", 4),))
    stages = int(re.search(r"pipeline stages\s+: (\d+)", out).group(1))
    size = int(re.search(r"shared memory\s+: (\d+) B", out).group(1))
    assert stages == 9 and size <= SM90_SMEM_BYTES, out


@pytest.mark.slow
@pytest.mark.parametrize("fmt_key,bits,x_dtype,scaled,tile_m,split", [
    ("int2", 2, torch.bfloat16, False, 128, 1), ("int2", 2, torch.float16, True, 64, 8),
    ("int1", 1, torch.bfloat16, True, 128, 8), ("int1", 1, torch.float16, False, 64, 1)])
def test_sync_consumers_compile_to_hmma(fmt_key, bits, x_dtype, scaled, tile_m, split):
    """1/2-bit weights at <= SYNC_MMA_MAX_M tokens: the consumers run mma.sync (HMMA.16816, x's B fragments by LDSM
    from the staged x tile) instead of register-sourced HGMMA; no spills, the same epilogue. Not above 8 tokens, and
    never for 4/8-bit weights or AWQ."""
    from cute_kernels.sass import compile_with_artifacts, summarize_cubin

    m, n, k = 3, 8192 if tile_m == 128 else 4096, 4096
    cfg = TileConfig(tile_m=tile_m, tile_n=16, cluster_m=1, cluster_n=1, split_k=split,
                     ctas_per_sm=2 if tile_m == 64 else 1)
    assert cfg in wgmma.shipped_configs()
    options = tuple(o for o in wgmma.launch_variant(bits, cfg, 132, m, n, k)[1] if o[0] != "split_cluster")
    assert ("sync_mma", 8) in options
    assert ("sync_mma", 8) not in wgmma.launch_variant(bits, cfg, 132, wgmma.SYNC_MMA_MAX_M + 1, n, k)[1]
    for other in (4, 8):
        assert not any(o[0] == "sync_mma" for o in wgmma.launch_variant(other, cfg, 132, m, n, k)[1])
    compiled = compile_with_artifacts(
        lambda o: wgmma.build(fmt_key, x_dtype, x_dtype, scaled, 128 if scaled else 64, cfg, extra_options=o,
                              kernel_options=dict(options)))
    s = summarize_cubin(compiled.artifacts.CUBIN)
    suffix = ".BF16" if x_dtype == torch.bfloat16 else ""
    assert s.mma.get(f"HMMA.16816.F32{suffix}", 0) > 0 and not any(op.startswith("HGMMA") for op in s.mma), dict(s.mma)
    assert s.instructions.get("LDSM", 0) > 0
    assert s.local_memory_ops == 0
