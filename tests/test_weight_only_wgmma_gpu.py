"""GPU tier of the weight-only WGMMA path, through the public ops (quantized_mm, awq_gemm, awq_linear): every
1/2/4/8-bit format and AWQ, fp16/bf16, group sizes 32 / 64 / 128 / IC, ragged N and K, split and unsplit tiles, several
token tiles; float64 references, fresh random inputs, NaN-poisoned outputs; the cached blob follows in-place weight
updates.
"""

import dataclasses
import weakref

import pytest
import torch

from cute_kernels import awq_gemm, awq_linear
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import quantized_mm, wgmma

from .conftest import poisoned, under_compute_sanitizer

pytestmark = pytest.mark.gpu

TOL = {torch.bfloat16: 8e-3, torch.float16: 1.5e-3}


def _err(out, ref):
    assert not out.isnan().any(), "unwritten (NaN) outputs"
    return ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("bits", [8, 4, 2, 1])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k,group", [(1, 264, 1088, None), (8, 520, 2112, 64), (16, 4096, 4096, None),
                                         (17, 200, 1088, None), (40, 4096, 4096, 128), (100, 264, 1088, None),
                                         (130, 264, 512, 64),
                                         (256, 520, 2048, 32), (600, 136, 1152, None)])
def test_quantized_mm(bits, dtype, m, n, k, group):
    torch.manual_seed(bits * 1000 + m)
    x = torch.randn(m, k, dtype=dtype, device="cuda")
    w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
    if gs is not None and bits in (4, 8):
        gs = gs.to(dtype)  # group scales in x's dtype (4/8-bit) and in float32 (1/2-bit)
    out = poisoned((m, n), dtype)
    assert quantized_mm(x, w, scale, bits, gs, out=out, path="wgmma") is out
    ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, bits, None if gs is None else gs.float().cpu())
    assert _err(out, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k,group,amp", [(1, 264, 1088, 64, 1.0), (16, 4104, 1024, 128, 1.0),
                                             (40, 520, 2176, 128, 30.0), (300, 264, 4096, 32, 0.001)])
def test_int4_one_fma_is_bit_equal_to_the_magic_decode(monkeypatch, dtype, m, n, k, group, amp):
    """Signed int4 with group scales on the WGMMA path (session 34: ``int4_fma`` up to ``INT4_ONE_FMA_MAX_M`` tokens)
    gives the magic-number decode's outputs bit for bit, with e = 0 and e > 0 (amp 30: group scales up to ~8)."""
    import importlib

    qmm_mod = importlib.import_module("cute_kernels.weight_only.quantized_mm")  # the module, not the op
    torch.manual_seed(m + n)
    x = torch.randn(m, k, dtype=dtype, device="cuda")
    w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda") * amp, 4, group)
    gs = gs.to(dtype)
    outs = []
    for limit in (wgmma.INT4_ONE_FMA_MAX_M, None):
        monkeypatch.setattr(wgmma, "INT4_ONE_FMA_MAX_M", limit)
        qmm_mod._plans.clear()
        assert wgmma.signed_format(4, True, m) == ("int4_fma" if limit else "int4")
        out = poisoned((m, n), dtype)
        quantized_mm(x, w, scale, 4, gs, out=out, path="wgmma")
        outs.append(out)
    qmm_mod._plans.clear()
    assert torch.equal(outs[0], outs[1])
    assert _err(outs[0], quantized_mm_ref(x.cpu(), w.cpu(), scale, 4, gs.float().cpu())) < TOL[dtype]


@pytest.mark.parametrize("bits,m,dtype", [(8, 129, torch.bfloat16), (8, 300, torch.float16), (4, 140, torch.bfloat16),
                                          (1, 257, torch.float16), (2, 150, torch.bfloat16), (8, 600, torch.bfloat16)])
def test_partial_last_token_tile(bits, m, dtype):
    """Token counts that are not whole token tiles: the last tile is moved back to end at the last token
    (``Sm90GemmKernel.tile_shifts``), or x runs as a zero-padded copy of whole tiles (``wgmma.x_rows``: two 256-token
    tiles, and one forced 128-token tile at 20 tokens). The caller's out gets exactly its M rows, on warm calls too, and x
    is untouched."""
    torch.manual_seed(bits + m)
    n, k = 8192, 1024
    cfg = wgmma.select_config(m, n, k, 132)
    assert m % cfg.tile_n  # the case under test: a partial last tile (moved, or x padded: ``x_rows``)
    x = torch.randn(m, k, dtype=dtype, device="cuda")
    x0 = x.clone()
    w, scale, _ = quantize_weights(torch.randn(n, k, device="cuda"), bits)
    ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, bits)
    for _ in range(2):
        out = poisoned((m, n), dtype)
        assert quantized_mm(x, w, scale, bits, out=out, path="wgmma") is out
        assert _err(out, ref) < TOL[dtype]
    assert torch.equal(x, x0)
    qweight, qzeros, scales = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, 128, torch.float16)
    xa = x.half()
    out = poisoned((m, n), torch.float16)
    awq_gemm(xa, qweight, scales, qzeros, out=out)
    assert _err(out, awq_gemm_ref(xa.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())) < TOL[torch.float16]
    if m == 129:  # x padded: 20 tokens on a forced 128-token tile
        forced = dataclasses.replace(cfg, tile_n=128, split_k=1)
        assert wgmma.x_rows(20, 128) == 128
        x20 = x[:20].contiguous()
        out = poisoned((20, n), dtype)
        wgmma.quantized_mm_wgmma(x20, w, out, scale, bits, None, wgmma.NO_GROUP, 132, cfg=forced)
        assert _err(out, quantized_mm_ref(x20.cpu(), w.cpu(), scale, bits)) < TOL[dtype]


def test_quantized_mm_default_dispatch_and_warm_calls():
    torch.manual_seed(7)
    m, n, k = 64, 1024, 2048
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), 4, 128)
    ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, 4, gs.cpu())
    for _ in range(3):  # the first call plans (WGMMA path at 64 tokens), the next ones take the warm path
        out = poisoned((m, n), torch.bfloat16)
        quantized_mm(x, w, scale, 4, gs, out=out)
        assert _err(out, ref) < TOL[torch.bfloat16]
    # an in-place update of the weight rebuilds the cached blob (its version is part of the key)
    w.copy_(torch.flip(w, dims=[0]))
    gs.copy_(torch.flip(gs, dims=[0]))
    out = quantized_mm(x, w, scale, 4, gs)
    assert _err(out, quantized_mm_ref(x.cpu(), w.cpu(), scale, 4, gs.cpu())) < TOL[torch.bfloat16]


def test_unaligned_x_is_copied():
    torch.manual_seed(3)
    m, n, k = 33, 256, 512
    base = torch.randn(m * k + 4, dtype=torch.float16, device="cuda")
    x = base[4:].view(m, k)  # 8-byte offset: not 16-byte aligned
    w, scale, _ = quantize_weights(torch.randn(n, k, device="cuda"), 4)
    out = quantized_mm(x, w, scale, 4, path="wgmma")
    assert _err(out, quantized_mm_ref(x.cpu(), w.cpu(), scale, 4)) < TOL[torch.float16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,oc,ic,group", [(17, 200, 1024, 128), (64, 4096, 4096, 128), (257, 1032, 2048, 64),
                                           (33, 520, 4096, 4096), (1000, 512, 1024, 32)])
def test_awq_gemm(dtype, m, oc, ic, group):
    torch.manual_seed(m + oc)
    x = torch.randn(m, ic, dtype=dtype, device="cuda")
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda") * 0.05, group, dtype)
    ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    for _ in range(2):  # default dispatch (WGMMA above 16 tokens on SM90), then the warm path
        out = poisoned((m, oc), dtype)
        awq_gemm(x, qweight, scales, qzeros, out=out)
        assert _err(out, ref) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("m,oc,ic,group", [(1, 200, 1024, 128), (12, 1032, 2176, 64)])
def test_awq_gemm_forced_wgmma_at_decode_sizes(dtype, m, oc, ic, group):
    # 16-token tiles (the default dispatch keeps AWQ on the decode path up to 16 tokens)
    torch.manual_seed(m + oc)
    x = torch.randn(m, ic, dtype=dtype, device="cuda")
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda") * 0.05, group, dtype)
    out = poisoned((m, oc), dtype)
    awq_gemm(x, qweight, scales, qzeros, out=out, path="wgmma")
    assert _err(out, awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())) < TOL[dtype]


@pytest.mark.parametrize("bits,m,group", [(1, 8, None), (2, 9, None), (4, 12, None), (4, 16, None), (1, 4, 128),
                                          (2, 8, 64), (4, 12, 128)])
def test_quantized_mm_default_dispatch_at_decode_sizes(bits, m, group):
    # from config.WGMMA_MIN_M tokens (WGMMA_MIN_M_GROUPED with group scales) the default dispatch takes the WGMMA path
    torch.manual_seed(bits + m)
    n, k = 1032, 2176
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
    ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, bits, None if gs is None else gs.cpu())
    for _ in range(2):
        out = poisoned((m, n), torch.bfloat16)
        quantized_mm(x, w, scale, bits, gs, out=out)
        assert _err(out, ref) < TOL[torch.bfloat16]


@pytest.mark.parametrize("m", [12, 16])
def test_awq_gemm_default_dispatch_at_decode_sizes(m):
    # this short-K layer (K = 2048, N * K <= config.WGMMA_AWQ_SHORT_MAX_WEIGHTS) keeps the decode tiles through 16
    # tokens (session 48; before, the WGMMA path ran it from config.WGMMA_MIN_M_AWQ_SMALL = 9)
    assert _path("awq", m, 1032, 2048) == "decode"
    torch.manual_seed(m)
    x = torch.randn(m, 2048, dtype=torch.float16, device="cuda")
    qweight, qzeros, scales = awq_quantize(torch.randn(2048, 1032, device="cuda") * 0.05, 128, torch.float16)
    ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
    for _ in range(2):
        out = poisoned((m, 1032), torch.float16)
        awq_gemm(x, qweight, scales, qzeros, out=out)
        assert _err(out, ref) < TOL[torch.float16]


def _layer_case(fmt, m, n, k, path=None):
    """(x's dtype, float64 reference, run(out)) of one call on an N x K layer through the ops: "awq" (g128, fp16 x),
    "int{bits}" (per-tensor scale) or "int{bits}g" (bf16 g128 group scales), bf16 x."""
    dtype = torch.float16 if fmt == "awq" else torch.bfloat16
    x = torch.randn(m, k, dtype=dtype, device="cuda")
    if fmt == "awq":
        qweight, qzeros, scales = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, 128, dtype)
        ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
        return dtype, ref, lambda out: awq_gemm(x, qweight, scales, qzeros, out=out, path=path)
    bits, grouped = int(fmt[3]), fmt.endswith("g")
    w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, 128 if grouped else None)
    gs = gs.to(dtype) if grouped else None
    ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, bits, None if gs is None else gs.float().cpu())
    return dtype, ref, lambda out: quantized_mm(x, w, scale, bits, gs, out=out, path=path)


def _check_twice(m, n, case):
    """Run a ``_layer_case`` twice (the second call takes the warm path) into NaN-poisoned outputs."""
    dtype, ref, run = case
    for _ in range(2):
        out = poisoned((m, n), dtype)
        run(out)
        assert _err(out, ref) < TOL[dtype]


def _path(fmt, m, n, k):
    """The default dispatch's path for ``_layer_case(fmt, ...)``."""
    from cute_kernels.weight_only import config

    awq, bits = fmt == "awq", 4 if fmt == "awq" else int(fmt[3])
    return config.select_tile(bits, m, n, 132, scaled=awq or fmt.endswith("g"), awq=awq, dense=not awq, k=k,
                              wgmma=True)[0]


@pytest.mark.parametrize("fmt,m", [("awq", 1), ("awq", 5), ("int4g", 1), ("int4g", 6)])
def test_grouped_4bit_on_a_cluster_split_layer_at_few_tokens(fmt, m):
    """Session 32's rule: grouped 4-bit weights on a long-K layer whose plan reduces in clusters (8192 x 8192) take
    the WGMMA path from one token; through the default dispatch, against float64."""
    torch.manual_seed(m + len(fmt))
    assert _path(fmt, m, 8192, 8192) == "wgmma"
    _check_twice(m, 8192, _layer_case(fmt, m, 8192, 8192))


@pytest.mark.parametrize("n,k,m,path", [(4096, 2048, 8, "decode"), (4096, 2048, 9, "wgmma"),
                                         (4096, 8192, 6, "decode"), (4096, 8192, 7, "wgmma"),
                                         (5120, 3072, 1, "wgmma"), (8192, 2048, 7, "decode")])
def test_awq_session46_entries_through_the_dispatch(n, k, m, path):
    """Session 46's entries: AWQ on layers whose decode grid is one wave keeps the decode tiles up to 8 tokens (small
    layers with K <= 8192, ``config.WGMMA_MIN_M_AWQ_SMALL``) or 6 (large ones filling the wave,
    ``WGMMA_MIN_M_AWQ_FULL_DECODE_WAVE``), on small layers whose decode grid is more than one wave the WGMMA path runs
    from one token (``WGMMA_MIN_M_AWQ_MULTI_WAVE_DECODE``; 8192 x 2048's side-by-side grid is one wave); on both sides
    of the boundaries, through the default dispatch, against float64."""
    torch.manual_seed(m + k)
    assert _path("awq", m, n, k) == path
    _check_twice(m, n, _layer_case("awq", m, n, k))


@pytest.mark.parametrize("n,k,m,path", [(2048, 2048, 16, "decode"), (2048, 2048, 17, "wgmma"),
                                         (4096, 1024, 13, "decode"), (3584, 2048, 9, "wgmma")])
def test_awq_session48_short_k_entry_through_the_dispatch(n, k, m, path):
    """Session 48's entry: AWQ on short-K small layers (K <= ``config.WGMMA_AWQ_SHORT_MAX_K``, N * K <=
    ``WGMMA_AWQ_SHORT_MAX_WEIGHTS``) keeps the decode tiles through 16 tokens; past the weight bound the WGMMA path
    still runs from 9; both sides of the boundaries, through the default dispatch, against float64."""
    torch.manual_seed(m + n)
    assert _path("awq", m, n, k) == path
    _check_twice(m, n, _layer_case("awq", m, n, k))


@pytest.mark.parametrize("m", [1, 3])
def test_unscaled_2bit_on_an_unsplit_layer_at_few_tokens(m):
    """Session 32's rule: unscaled 2-bit weights on a large layer whose WGMMA tiles need no K split (14336 x 4096) take
    the WGMMA path (mma.sync consumers) from one token; through the default dispatch, against float64."""
    torch.manual_seed(m)
    assert _path("int2", m, 14336, 4096) == "wgmma"
    _check_twice(m, 14336, _layer_case("int2", m, 14336, 4096))


@pytest.mark.parametrize("fmt,m", [("int1", 1), ("int2g", 2), ("awq", 1), ("awq", 6), ("int4g", 1), ("int4g", 8)])
def test_many_wave_layer_entries_through_the_dispatch(fmt, m):
    """Sessions 32-34: a large layer whose every-tile K split would make many waves (``wgmma.many_waves``: 12288 x
    4096) takes its own entries (``config.WGMMA_MIN_M_MANY_WAVES``: 1/2-bit weights from one token; since session 34
    AWQ and int4 g128 too); through the default dispatch, against float64."""
    from cute_kernels.weight_only import config

    torch.manual_seed(m + len(fmt))
    first = {"int1": 1, "int2g": 1, "awq": config.WGMMA_MIN_M_AWQ_MANY_WAVES,
             "int4g": config.WGMMA_MIN_M_GROUPED_MANY_WAVES[4]}[fmt]
    assert _path(fmt, m, 12288, 4096) == ("wgmma" if m >= first else "decode")
    _check_twice(m, 12288, _layer_case(fmt, m, 12288, 4096))


@pytest.mark.parametrize("fmt,m", [("awq", 1), ("awq", 16), ("int2", 8)])
def test_tail_split_plan_through_the_dispatch(fmt, m):
    """Session 32: 22016 x 4096 (172 tiles of 128 rows) runs 132 tiles whole and the last 40 in 3 K slices on the
    WGMMA path (``wgmma.SPLIT_MAX_WAVES``); through the default dispatch (since session 33 AWQ and unscaled 2-bit take
    that path from one token there: ``config.WGMMA_MIN_M_AWQ_FULL_WAVE``, ``WGMMA_MIN_M_MANY_WAVES``); against
    float64."""
    torch.manual_seed(m + len(fmt))
    assert wgmma.select_config(m, 22016, 4096).split_tail == 3
    assert _path(fmt, m, 22016, 4096) == "wgmma"
    _check_twice(m, 22016, _layer_case(fmt, m, 22016, 4096))


@pytest.mark.parametrize("tokens", [16, 17, 300, 4096, 4097])
def test_awq_linear_across_the_switch(tokens):
    torch.manual_seed(tokens)
    ic, oc = 1024, 512  # decode path up to 16 tokens, WGMMA up to 4096, dense above
    x = torch.randn(tokens, ic, dtype=torch.float16, device="cuda")
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda") * 0.05, 128, torch.float16)
    bias = torch.randn(oc, dtype=torch.float16, device="cuda")
    out = awq_linear(x, qweight, scales, qzeros, bias)
    ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu()) + bias.double().cpu()
    assert _err(out, ref) < TOL[torch.float16]


def test_forced_wgmma_path_rejects_what_it_cannot_run():
    x = torch.randn(32, 256, dtype=torch.float32, device="cuda")
    w, scale, _ = quantize_weights(torch.randn(64, 256, device="cuda"), 4)
    with pytest.raises(ValueError, match="path='wgmma' is not available"):
        quantized_mm(x, w, scale, 4, path="wgmma")  # fp32 x
    with pytest.raises(ValueError, match="path='wgmma' is not available"):
        quantized_mm(x.half(), w, scale, 4, out_dtype=torch.float32, path="wgmma")  # out dtype != x dtype


def test_blob_cache_is_dropped_with_the_weight():
    import gc

    wgmma.clear_cache()
    x = torch.randn(32, 256, dtype=torch.bfloat16, device="cuda")
    w, scale, _ = quantize_weights(torch.randn(64, 256, device="cuda"), 4)
    quantized_mm(x, w, scale, 4, path="wgmma")
    assert len(wgmma._blobs) == 1
    del w
    gc.collect()
    assert len(wgmma._blobs) == 0


def test_group_parameters_follow_in_place_updates():
    """The kernel reads its group scales through a cached re-layout (``wgmma.cached_params``): an in-place update of
    the scales is seen by the next call, and the cache entry goes with the scales."""
    import gc

    wgmma.clear_cache()
    torch.manual_seed(7)
    x = torch.randn(24, 512, dtype=torch.bfloat16, device="cuda")
    w, scale, gs = quantize_weights(torch.randn(136, 512, device="cuda"), 4, 128)
    gs = gs.to(torch.bfloat16)
    quantized_mm(x, w, scale, 4, gs, path="wgmma")
    gs.mul_(-2.0)
    out = poisoned((24, 136), torch.bfloat16)
    quantized_mm(x, w, scale, 4, gs, out=out, path="wgmma")
    ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, 4, gs.float().cpu())
    assert _err(out, ref) < TOL[torch.bfloat16]
    assert len(wgmma._params) == 2
    scales = weakref.ref(gs)
    del gs
    gc.collect()
    alive = scales() is not None
    assert len(wgmma._params) == (2 if alive else 0)  # the entries live exactly as long as the scales
    if not under_compute_sanitizer():
        # Under compute-sanitizer the Python frames on the stack at each CUDA allocation stay referenced from C
        # (frames of this call chain, which hold the scales, outlive the calls; session 18's
        # params_cache_probe.py, in the data archive's session36/moved/), so there the scales, and with them the
        # entries, live on.
        assert not alive


@pytest.mark.parametrize("fam,m,group", [("awq", 8, 64), ("awq", 32, 64), ("int4g", 64, 64), ("int4g", 64, 128),
                                         ("int4", 48, None)])
def test_large_layers_through_the_default_dispatch(fam, m, group):
    # layers of >= config.WGMMA_LARGE_LAYER weights get their own dispatch (grouped 4-bit from 8 tokens) and stage
    # options (two K-tiles per stage on 32/64-token tiles: wgmma.stage_options); ragged last K stage (K = 4160). int4
    # g128 (K = 4224, a multiple of its group) covers the two-K-tile stages with one group per stage
    from cute_kernels.weight_only import config

    torch.manual_seed(m)
    n, k = 8072, 4160 if group != 128 else 4224
    assert n * k >= config.WGMMA_LARGE_LAYER
    if fam == "awq":
        x = torch.randn(m, k, dtype=torch.float16, device="cuda")
        qweight, qzeros, scales = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, group, torch.float16)
        ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
        out = poisoned((m, n), torch.float16)
        awq_gemm(x, qweight, scales, qzeros, out=out)
        assert _err(out, ref) < TOL[torch.float16]
        return
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), 4, group)
    gs = None if gs is None else gs.to(torch.bfloat16)
    ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, 4, None if gs is None else gs.float().cpu())
    out = poisoned((m, n), torch.bfloat16)
    quantized_mm(x, w, scale, 4, gs, out=out)
    assert _err(out, ref) < TOL[torch.bfloat16]


@pytest.mark.parametrize("fam,m,n,k", [("int1", 1, 520, 2176), ("int2", 5, 8192, 8192), ("int2g", 3, 4096, 4096),
                                       ("int4", 8, 1032, 2112), ("int8", 2, 264, 1088), ("awq", 7, 4096, 14336),
                                       ("int1g", 4, 8072, 4224), ("awq", 9, 520, 2048)])
def test_sync_consumers_against_wgmma_consumers(fam, m, n, k):
    """1/2-bit weights at <= wgmma.SYNC_MMA_MAX_M tokens: the WGMMA path's consumers run mma.sync over the token tile's
    first 8 columns (``WeightOnlyWgmmaSm90.mainloop_sync``). Split layers (cluster and workspace split-K), the 64-row
    small-layer tile, ragged N and K stages, group parameters; forced (True) also for 4/8-bit and AWQ, which the rule
    leaves on WGMMA, and at 9 tokens (two 8-token chunks). Forced on, the rule, forced off: each against float64."""
    torch.manual_seed(m + n)
    dtype = torch.float16 if fam == "awq" else torch.bfloat16
    group = 128 if fam == "awq" or fam.endswith("g") else None
    bits = 4 if fam == "awq" else int(fam[3])
    x = torch.randn(m, k, dtype=dtype, device="cuda")
    if fam == "awq":
        qweight, qzeros, scales = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, group, dtype)
        ref = awq_gemm_ref(x.cpu(), qweight.cpu(), scales.cpu(), qzeros.cpu())
        run = lambda out: awq_gemm(x, qweight, scales, qzeros, out=out, path="wgmma")  # noqa: E731
    else:
        w, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
        gs = None if gs is None else gs.to(dtype)
        ref = quantized_mm_ref(x.cpu(), w.cpu(), scale, bits, None if gs is None else gs.float().cpu())
        run = lambda out: wgmma.quantized_mm_wgmma(  # noqa: E731
            x, w, out, scale, bits, gs, group or wgmma.NO_GROUP, 132)
    assert (wgmma.launch_variant(bits, wgmma.select_config(m, n, k), 132, m, n, k)[1].count(("sync_mma", 8)) == 1) == (
        m <= wgmma.SYNC_MMA_MAX_M and bits <= wgmma.SYNC_MMA_MAX_BITS)
    for forced in (True, None, False):
        wgmma.SYNC_MMA = forced
        try:
            out = poisoned((m, n), dtype)
            run(out)
        finally:
            wgmma.SYNC_MMA = None
        assert _err(out, ref) < TOL[dtype], forced
