"""CPU tier: the SM90 AWQ blob (awq_sm90.py) and the decode tiles that can read it (blob_decode.py).

The blob built from the checkpoint is the one the repack route built; formats that pair a word's elements alike
share one blob; the cache follows the weight; the decode variants compile to HMMA + ldmatrix without spills.
"""

import gc

import pytest
import torch

from cute_kernels.formats.awq import awq_quantize, unpack_int4
from cute_kernels.sass import summarize_cubin
from cute_kernels.weight_only import awq_repack, awq_sm90, blob_decode, formats, wgmma
from cute_kernels.weight_only.compile import blob_decode_with_cubin
from cute_kernels.weight_only.kernel import TileShape

DECODE_1 = TileShape(nt=1, mt=1, warps_n=1, warps_k=8, x_ahead=True, l2_prefetch_mb=4)  # 4096-row layers
DECODE_4 = TileShape(nt=1, mt=1, warps_n=4, warps_k=2, x_ahead=True, l2_prefetch_mb=4)  # 14336 x 4096


def _checkpoint(ic, oc, group, seed=0):
    torch.manual_seed(seed)
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc) * 0.05, group, torch.float16)
    return qweight, scales, qzeros


@pytest.mark.parametrize("ic,oc,group,chunk", [(256, 200, 64, None), (512, 1032, 128, 1 << 14), (192, 72, 192, 1)])
def test_blob_from_checkpoint_is_the_repack_routes_blob(ic, oc, group, chunk, monkeypatch):
    qweight, scales, qzeros = _checkpoint(ic, oc, group)
    if chunk:
        monkeypatch.setattr(wgmma, "CHUNK_CODES", chunk)  # several chunks of output channels (or one per block)
    blob = awq_sm90.blob_from_checkpoint(qweight)
    kw = awq_repack.repack(qweight, scales, qzeros, group)
    assert torch.equal(blob, wgmma.blob_from_packed(kw.row_major(), 4, "awq", ic))
    assert torch.equal(wgmma.codes_from_blob(blob, 4, "awq", oc, ic), unpack_int4(qweight).t().long())


def test_parameter_words_match_the_repack_routes():
    qweight, scales, qzeros = _checkpoint(512, 136, 128)
    aw = awq_sm90.build(qweight, scales, qzeros, 128)
    kw = awq_repack.repack(qweight, scales, qzeros, 128)
    for fmt in ("awq", "awq_fma"):
        assert torch.equal(aw.params(fmt, torch.float16), wgmma.param_words(fmt, kw.scales, kw.zeros, torch.float16))
        assert aw.params(fmt, torch.float16) is aw.params(fmt, torch.float16)
    assert aw.out_features == 136 and aw.max_abs_scale == kw.max_abs_scale


def test_formats_that_pair_alike_share_one_blob():
    packed = torch.randint(0, 256, (128, 128), dtype=torch.uint8)
    wgmma.clear_cache()
    assert wgmma.cached_blob(packed, 4, "awq", 256) is wgmma.cached_blob(packed, 4, "awq_fma", 256)
    assert wgmma.cached_blob(packed, 4, "int4", 256) is wgmma.cached_blob(packed, 4, "int4_fma", 256)
    assert len(wgmma._blobs) == 1  # the four keys: one pairing (bits 4, pairs (q, q + 4))
    assert wgmma.blob_order(8, "int8") != wgmma.blob_order(4, "int4")


def test_weights_cache_follows_the_checkpoint():
    awq_sm90.clear_cache()
    qweight, scales, qzeros = _checkpoint(256, 128, 128)
    a = awq_sm90.weights(qweight, scales, qzeros, 128)
    assert awq_sm90.weights(qweight, scales, qzeros, 128) is a
    assert awq_sm90.cached(awq_repack.cache_key(qweight, scales, qzeros)) is a
    scales.mul_(2.0)  # in place: a new version, a new entry
    assert awq_sm90.weights(qweight, scales, qzeros, 128) is not a
    del qweight, a
    gc.collect()
    assert not awq_sm90._cache


def test_decode_variant_rule():
    """The blob's decode plans: x staged whole at one token where it fits, per step above; the exact ``awq`` words
    (promoted with warps side by side) at fp16 and bf16 (``BLOB_DECODE_ONE_FMA`` off: awq_fma's one-word words ran
    these tiles slower, session 43), awq_fma at fp16 with it on; 2 CTAs per SM."""
    qweight, scales, qzeros = _checkpoint(4096, 64, 128)
    aw = awq_sm90.build(qweight, scales, qzeros, 128)
    one = awq_sm90.DecodePlan(torch.float16, aw, 1, DECODE_1, "sm_90a")
    assert (one.fmt_key, one.options["x_stage"], one.options["x_rows"]) == ("awq", "whole", 1)
    assert not one.promote and awq_sm90.DecodePlan(torch.float16, aw, 1, DECODE_4, "sm_90a").promote
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(awq_sm90, "BLOB_DECODE_ONE_FMA", True)
        assert awq_sm90.DecodePlan(torch.float16, aw, 1, DECODE_1, "sm_90a").fmt_key == "awq_fma"
    assert one.tile.max_ctas_per_sm == awq_sm90.CTAS_PER_SM and one.options["group_per_step"]
    four = awq_sm90.DecodePlan(torch.float16, aw, 3, DECODE_1, "sm_90a")
    assert (four.options["x_stage"], four.options["x_rows"]) == ("step", 4)
    bf = awq_sm90.DecodePlan(torch.bfloat16, aw, 1, DECODE_4, "sm_90a")
    assert bf.fmt_key == "awq" and bf.promote
    assert not awq_sm90.DecodePlan(torch.bfloat16, aw, 1, DECODE_1, "sm_90a").promote
    long_k = awq_sm90.build(*_checkpoint(40960, 8, 128), 128)  # 80 KB of x: over the whole-x buffer
    assert awq_sm90.DecodePlan(torch.float16, long_k, 1, DECODE_1, "sm_90a").options["x_stage"] == "step"
    assert not awq_sm90.decode_ok(TileShape(1, 1, 1, 8, stages=3), 128, 4096)  # the cp.async ring: repack reader
    assert not awq_sm90.decode_ok(DECODE_1, 32, 4096)  # two groups in a K-tile
    assert blob_decode.supports(4096, 4096) and blob_decode.supports(64, 4096)


def test_blob_decode_rejects_what_it_cannot_run():
    awq = formats.format_by_key("awq")
    import cutlass

    with pytest.raises(ValueError, match="4-bit"):
        blob_decode.BlobDecodeGemm(formats.format_by_key("int2"), cutlass.Float16, cutlass.Float16, DECODE_1)
    with pytest.raises(ValueError, match="register pipeline"):
        blob_decode.BlobDecodeGemm(awq, cutlass.Float16, cutlass.Float16, TileShape(1, 1, 1, 8, stages=3))
    with pytest.raises(ValueError, match="x_stage"):
        blob_decode.BlobDecodeGemm(awq, cutlass.Float16, cutlass.Float16,
                                   TileShape(1, 2, 1, 8, x_ahead=True), x_stage="whole")
    with pytest.raises(ValueError, match="max_ctas_per_sm=3"):  # 64 KB of x + the split-K buffer over 57 KB
        blob_decode.BlobDecodeGemm(awq, cutlass.Float16, cutlass.Float16,
                                   TileShape(1, 1, 1, 8, x_ahead=True, max_ctas_per_sm=3), x_stage="whole")


@pytest.mark.parametrize("fmt,dtype,tile,promote,stage,rows,bias", [
    ("awq_fma", torch.float16, DECODE_1, False, "whole", 1, False),
    ("awq_fma", torch.float16, DECODE_1, False, "step", 4, True),
    ("awq", torch.bfloat16, DECODE_1, False, "whole", 1, False),
    ("awq", torch.bfloat16, DECODE_4, True, "step", 2, False),
    ("awq_fma", torch.float16, DECODE_4, False, "whole", 1, True),
])
def test_blob_decode_variants_compile_to_hmma_and_ldmatrix(fmt, dtype, tile, promote, stage, rows, bias):
    from dataclasses import replace

    tile = replace(tile, max_ctas_per_sm=2)
    s = summarize_cubin(blob_decode_with_cubin(fmt, dtype, dtype, tile, promote_scales=promote, x_stage=stage,
                                               x_rows=rows, group_per_step=True, has_bias=bias).artifacts.CUBIN)
    (name,) = s.kernels
    assert "BlobDecodeGemm" in name  # the template's one kernel function, specialized by the subclass
    mma = "HMMA.16816.F32" + (".BF16" if dtype == torch.bfloat16 else "")
    assert s.mma.get(mma, 0) == 8, s.mma  # one K step: two K-tiles x four k-blocks
    assert s.instructions.get("LDSM", 0) == 4 and s.instructions.get("LDGSTS", 0) >= 1
    assert not s.spills, f"{s.local_memory_ops} local-memory ops (register spills)"
    assert "ACQBULK" in s.instructions, "griddepcontrol.wait (programmatic dependent launch) missing"
