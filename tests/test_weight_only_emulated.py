"""CPU tier: the weight-only kernels' data path run on an emulated warp (tests/weight_only_simt.py).

The host ops (``quantized_mm``, ``awq_gemm``) run as in production - checks, K padding, AWQ repack, tile dispatch -
with the compiled launch replaced by the lane-vector emulation of the kernel's own decode/MMA code, and compared with
the float64 references on fresh random data, outputs poisoned with NaN.
"""

import dataclasses
import importlib

import numpy as np
import pytest
import torch

from . import weight_only_simt as simt
from cute_kernels import checks
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.formats.bitpack import quantize_weights, unpack_weights
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import config, formats
from cute_kernels.weight_only.compile import cutlass_dtype
from cute_kernels.weight_only.kernel import WeightOnlyGemm, promotes_scales

# modules, not the functions of the same name that the package exports
qmm_ops = importlib.import_module("cute_kernels.weight_only.quantized_mm")
awq_ops = importlib.import_module("cute_kernels.weight_only.awq")


def _emulated_launch(fmt_key, x, w, out, scale, group_scales, zeros, group, tile, device, bias=None):
    fmt = formats.format_by_key(fmt_key)
    k = WeightOnlyGemm(fmt, cutlass_dtype(x.dtype), cutlass_dtype(out.dtype),
                       None if group_scales is None  # (TileShape.param_words: int32 words of x-dtype scales)
                       else cutlass_dtype(x.dtype if tile.param_words else group_scales.dtype), tile,
                       qmm_ops.use_promoted_scales(fmt_key, group_scales is not None, group, x.dtype, tile))
    simt.run_kernel(k, x, w, out, scale, group_scales, zeros, group, bias)
    return None


@pytest.fixture
def emulated_ops(monkeypatch):
    monkeypatch.setattr(qmm_ops, "launch", _emulated_launch)
    monkeypatch.setattr(awq_ops, "launch", _emulated_launch)
    monkeypatch.setattr(checks, "check_cuda", lambda tensors: torch.device("cpu"))


def _rel_err(out, ref):
    return ((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1e-30)).item()


# Tolerance relative to max|ref|: the output rounding of the dtype (bf16 2^-9, fp16 2^-12) plus fp32 accumulation;
# fp32 x with group scales carries the bf16 rounding of the folded scale.
_TOL = {torch.bfloat16: 8e-3, torch.float16: 1.5e-3, torch.float32: 2e-5}


@pytest.mark.parametrize("in_place", [True, False], ids=["fields_in_place", "shift_per_pair"])
@pytest.mark.parametrize("fmt_bits", [8, 4, 2, 1])
@pytest.mark.parametrize("ct", [formats.F16, formats.BF16], ids=["f16", "bf16"])
def test_decode_every_code(fmt_bits, ct, in_place):
    """Every code of every width decodes to the bitpack value, in both compute types and both field placements."""
    fmt = formats.signed_format(fmt_bits)
    rng = np.random.default_rng(fmt_bits)
    words = simt.u32(rng.integers(0, 2**32, simt.LANES))
    words[0], words[1] = 0, 0xFFFFFFFF
    packed = torch.from_numpy(words.view(np.uint8).reshape(simt.LANES, 4).copy())
    expect = unpack_weights(packed, fmt_bits, 32 // fmt_bits).double()
    with simt.emulated(simt.Memory()):
        prepared = fmt.prepare_word(words, ct)
        for q in range(fmt.pairs_per_word):
            lo, hi = simt._halves(fmt.decode_pair(prepared, q, ct, None, in_place), ct.x2)
            e_lo, e_hi = fmt.pair_elems(q)
            assert np.array_equal(lo, expect[:, e_lo].numpy()), (q, "low half")
            assert np.array_equal(hi, expect[:, e_hi].numpy()), (q, "high half")


def _awq_decoded_pairs(fmt, ct, in_place, seed):
    """(z, q, ctx, decoded low half, high half, their codes) for every zero point z and pair q of 32 random words
    (0 and 0xFFFFFFFF among them), decoded by the kernel's code under the emulation."""
    rng = np.random.default_rng(seed)
    words = simt.u32(rng.integers(0, 2**32, simt.LANES))
    words[0], words[1] = 0, 0xFFFFFFFF
    nibbles = [((words >> (4 * i)) & 0xF).astype(np.float64) for i in range(8)]
    with simt.emulated(simt.Memory()):
        for z in range(16):
            ctx = fmt.group_ctx(ct, None, simt.u32(np.full(simt.LANES, z)), in_place)
            for q in range(fmt.pairs_per_word):
                lo, hi = simt._halves(fmt.decode_pair(words, q, ct, ctx, in_place), ct.x2)
                e_lo, e_hi = fmt.pair_elems(q)
                yield z, q, ctx, lo, hi, nibbles[e_lo], nibbles[e_hi]


@pytest.mark.parametrize("in_place", [True, False], ids=["fields_in_place", "shift_per_pair"])
@pytest.mark.parametrize("ct", [formats.F16, formats.BF16], ids=["f16", "bf16"])
def test_awq_decode_every_code_and_zero(ct, in_place):
    """AWQ's (u - z) for every code u of every pair and every zero point z, before any scale."""
    for z, q, _, lo, hi, u_lo, u_hi in _awq_decoded_pairs(formats.AWQ, ct, in_place, 7):
        assert np.array_equal(lo, u_lo - z), (z, q, "low half")
        assert np.array_equal(hi, u_hi - z), (z, q, "high half")


def test_awq_one_fma_decode_path_context_every_code_and_zero():
    """awq_fma's decode-path context (fp32 scale and u8 zero point loaded by the kernel, e = 0): the decode is
    round(u s + round(-z s)) - one rounding of C and one of the result, fp16. Promoted tiles (no scale in the decode)
    never run this format."""
    fmt, ct = formats.AWQ_ONE_FMA, formats.F16
    rng = np.random.default_rng(11)
    words = simt.u32(rng.integers(0, 2**32, simt.LANES))
    words[0], words[1] = 0, 0xFFFFFFFF
    nibbles = [((words >> (4 * i)) & 0xF).astype(np.float64) for i in range(8)]
    scale = rng.uniform(-0.2, 0.2, simt.LANES).astype(np.float16).astype(np.float32)  # |s| < 0.25: e = 0
    with simt.emulated(simt.Memory()):
        for z in range(16):
            zero = simt.u32(np.full(simt.LANES, z))
            ctx = fmt.group_ctx(ct, scale, zero)
            c = (-z * scale.astype(np.float64)).astype(np.float16).astype(np.float64)
            for q in range(fmt.pairs_per_word):
                lo, hi = simt._halves(fmt.decode_pair(words, q, ct, ctx), ct.x2)
                for half, e in zip((lo, hi), fmt.pair_elems(q)):
                    expect = (nibbles[e] * scale + c).astype(np.float16).astype(np.float64)
                    assert np.array_equal(half, expect), (z, q, e)
    with pytest.raises(NotImplementedError):
        fmt.group_ctx(ct, None, simt.u32(np.zeros(simt.LANES)))


def test_fields_in_place_saves_shifts():
    """The point of in-place fields: how many differently shifted copies of a word the decode asks for (a shift of
    0 is the word itself)."""
    expect = {(1, "f16"): 2, (1, "bf16"): 3, (2, "f16"): 2, (2, "bf16"): 3, (4, "f16"): 2, (4, "bf16"): 4}
    for (bits, ct_name), copies in expect.items():
        fmt, ct = formats.signed_format(bits), {"f16": formats.F16, "bf16": formats.BF16}[ct_name]
        bits_at = fmt.field_bits(ct, True)
        shifts = {bits * q - bits_at[q % len(bits_at)] for q in range(fmt.pairs_per_word)}
        assert len(shifts) == copies, (bits, ct_name, sorted(shifts))
        assert fmt.field_bits(ct, False) == [0]


def test_fields_in_place_dispatch():
    """Where the shipped plans decode in place (config.FIELDS_IN_PLACE_NOTE)."""
    tile = config.decode_tile
    assert tile(2, 1, 4096, 132).fields_in_place and tile(2, 8, 8192, 132).fields_in_place
    assert not tile(2, 16, 8192, 132).fields_in_place and not tile(2, 16, 4096, 132).fields_in_place
    # 1-bit at M <= 8 from 2 tiles per warp on (N = 8192 keeps 2, N = 4096 halves to 1)
    assert tile(1, 8, 8192, 132).fields_in_place and not tile(1, 8, 4096, 132).fields_in_place
    assert tile(1, 16, 4096, 132).fields_in_place and not tile(1, 16, 8192, 132).fields_in_place  # token-major
    assert not tile("awq", 1, 8192, 132).fields_in_place and not tile(4, 1, 8192, 132).fields_in_place
    assert not tile(8, 1, 8192, 132).fields_in_place
    assert config.tensor_core_tile(64, True, "awq").fields_in_place and config.tensor_core_tile(4096, False, 4)\
        .fields_in_place
    assert not config.tensor_core_tile(64, False, 2).fields_in_place and not config.tensor_core_tile(64, False, 8)\
        .fields_in_place
    assert tile(1, 8, 8192, 132, fields_in_place=False).fields_in_place is False  # the override


CASES = [  # bits, x dtype, M, N, K, group
    (8, torch.bfloat16, 1, 40, 256, None),
    (8, torch.float16, 3, 24, 288, 32),
    (4, torch.bfloat16, 5, 40, 160, None),
    (4, torch.float16, 16, 33, 128, 64),
    (4, torch.float32, 2, 17, 96, None),
    (2, torch.float16, 9, 40, 320, None),
    (2, torch.bfloat16, 1, 24, 192, 32),
    (1, torch.bfloat16, 4, 24, 640, None),
    (1, torch.float32, 3, 17, 256, 128),
    (4, torch.bfloat16, 3, 20, 100, None),  # K % 32 != 0: padded path
    # groups that hold whole K steps (512 / bits values): scales promoted onto the fp32 partial sums
    (4, torch.float16, 3, 40, 384, 128),
    (8, torch.bfloat16, 12, 24, 256, 64),
    (2, torch.float16, 1, 24, 512, 256),
    (4, torch.float32, 2, 17, 256, 128),
    # 19 K steps over 8 warps: 2-3 steps per warp (with and without x prefetch); also run with swapping registers
    (4, torch.bfloat16, 1, 24, 19 * 128, None),
    (2, torch.float16, 3, 17, 19 * 256, 64),
    # fields in place (config.FIELDS_IN_PLACE_NOTE): the 9-16-token 1-bit plan on a narrow layer, the 2-bit plan
    (1, torch.float16, 12, 40, 512, None),
    (2, torch.float16, 1, 24, 640, None),
]


@pytest.mark.parametrize("bits,dtype,M,N,K,group", CASES)
def test_quantized_mm_emulated(emulated_ops, bits, dtype, M, N, K, group):
    torch.manual_seed(bits * 100 + M)
    x = torch.randn(M, K, dtype=dtype)
    w_packed, scale, gs = quantize_weights(torch.randn(N, K), bits, group)
    out = torch.full((M, N), float("nan"), dtype=dtype)
    qmm_ops.quantized_mm(x, w_packed, scale, bits, gs, out=out)
    ref = quantized_mm_ref(x, w_packed, scale, bits, gs)
    assert not out.isnan().any()
    assert _rel_err(out, ref) < _tolerance(dtype, bits, group)


def _tolerance(dtype, bits, group):
    """fp32 x with group scales folded into the weights carries the bf16 rounding of the scale; promoted scales
    (groups of whole K steps) stay in fp32."""
    folded = group is not None and not promotes_scales(formats.signed_format(bits), True, group)
    return 8e-3 if dtype == torch.float32 and folded else _TOL[dtype]


def test_scale_promotion_rule():
    """Promotion needs every K step (four 16-byte vectors: 512 / bits values) inside one group."""
    assert [promotes_scales(formats.signed_format(b), True, g) for b, g in ((4, 128), (4, 64), (8, 64), (2, 128),
                                                                             (2, 256), (1, 512), (4, 4096))] == \
        [True, False, True, False, True, True, True]
    # AWQ can promote at G = 128; it does only on the side-by-side decode tiles (use_promoted_scales: measured)
    assert promotes_scales(formats.AWQ, True, 128) and not promotes_scales(formats.AWQ, True, 32)
    assert not promotes_scales(formats.signed_format(4), False, 128)
    # Where it is used (measured): decode tiles always, the 32-token tensor-core tiles only for fp32 x.
    decode, tc = config.decode_tile(4, 1, 4096, 132), config.tensor_core_tile(64, scaled=True, fmt=4)
    use = qmm_ops.use_promoted_scales
    assert use("int4", True, 128, torch.bfloat16, decode) and use("int4", True, 128, torch.float32, tc)
    assert not use("int4", True, 128, torch.bfloat16, tc) and not use("int4", True, 64, torch.float32, decode)
    assert not use("awq", True, 128, torch.float16, decode)
    wide = config.decode_tile("awq", 1, 14336, 132, scaled=True, k=4096)
    assert wide.warps_n > 1 and use("awq", True, 128, torch.float16, wide)
    assert not use("awq", True, 64, torch.float16, wide)
    assert not use("awq", True, 128, torch.float16, config.tensor_core_tile(64, scaled=True, fmt="awq"))


@pytest.mark.parametrize("bits,dtype,M,N,K,group", [CASES[0], CASES[3], CASES[6], CASES[8], CASES[10]])
def test_quantized_mm_other_weight_pipeline_emulated(emulated_ops, bits, dtype, M, N, K, group):
    """The decode tiles' weight pipeline and x prefetch that the dispatch does not pick for this width and M."""
    torch.manual_seed(bits * 10 + M)
    x = torch.randn(M, K, dtype=dtype)
    w_packed, scale, gs = quantize_weights(torch.randn(N, K), bits, group)
    out = torch.full((M, N), float("nan"), dtype=dtype)
    plan = config.decode_plan(bits, M)
    tile = config.decode_tile(bits, M, N, 132, ring=not plan.ring, x_ahead=not plan.x_ahead)
    assert (tile.stages > 0) != plan.ring and tile.x_ahead != plan.x_ahead
    qmm_ops.quantized_mm(x, w_packed, scale, bits, gs, out=out, tile=tile)
    ref = quantized_mm_ref(x, w_packed, scale, bits, gs)
    assert _rel_err(out, ref) < _tolerance(dtype, bits, group)


@pytest.mark.parametrize("bits,dtype,M,N,K,group", CASES[-2:])
def test_quantized_mm_swapping_registers_emulated(emulated_ops, bits, dtype, M, N, K, group):
    """``TileShape.swap_registers`` (shipped for 2-bit at M <= 8 only): the unrolled pairs and the odd last step."""
    torch.manual_seed(bits * 7 + M)
    x = torch.randn(M, K, dtype=dtype)
    w_packed, scale, gs = quantize_weights(torch.randn(N, K), bits, group)
    out = torch.full((M, N), float("nan"), dtype=dtype)
    tile = config.decode_tile(bits, M, N, 132, ring=False, swap_registers=True)
    assert tile.swap_registers and tile.stages == 0
    qmm_ops.quantized_mm(x, w_packed, scale, bits, gs, out=out, tile=tile)
    ref = quantized_mm_ref(x, w_packed, scale, bits, gs)
    assert _rel_err(out, ref) < _tolerance(dtype, bits, group)


@pytest.mark.parametrize("bits,dtype,M,N,K,group,warps_n", [
    CASES[2] + (2,), CASES[3] + (4,), CASES[1] + (2,), CASES[10] + (4,), CASES[14] + (2,),
])
def test_quantized_mm_side_by_side_warps_emulated(emulated_ops, bits, dtype, M, N, K, group, warps_n):
    """Decode tiles with 2 or 4 warps side by side along N (``config.side_by_side_warps``), forced on small shapes:
    the per-warp row offsets and the split-K sum over the remaining 8 / warps_n warps."""
    torch.manual_seed(bits * 17 + M + warps_n)
    x = torch.randn(M, K, dtype=dtype)
    w_packed, scale, gs = quantize_weights(torch.randn(N, K), bits, group)
    out = torch.full((M, N), float("nan"), dtype=dtype)
    tile = dataclasses.replace(config.decode_tile(bits, M, N, 132, scaled=gs is not None), warps_n=warps_n,
                               warps_k=8 // warps_n)
    qmm_ops.quantized_mm(x, w_packed, scale, bits, gs, out=out, tile=tile)
    ref = quantized_mm_ref(x, w_packed, scale, bits, gs)
    assert _rel_err(out, ref) < _tolerance(dtype, bits, group)


@pytest.mark.parametrize("bits,dtype,M,N,K", [(2, torch.float16, 16, 72, 512), (1, torch.bfloat16, 11, 40, 1024),
                                              (1, torch.float32, 14, 24, 256)])
def test_quantized_mm_low_bit_wide_plan_emulated(emulated_ops, bits, dtype, M, N, K):
    """The 9-16-token plan of 1/2-bit weights on wide layers (4 tiles, both token tiles, 3-stage ring); one SM makes a
    small N count as wide."""
    torch.manual_seed(bits + M)
    x = torch.randn(M, K, dtype=dtype)
    w_packed, scale, _ = quantize_weights(torch.randn(N, K), bits, None)
    out = torch.full((M, N), float("nan"), dtype=dtype)
    tile = config.decode_tile(bits, M, N, 1)
    assert (tile.nt, tile.mt, tile.stages, tile.token_major) == (4, 2, 3, False)
    qmm_ops.quantized_mm(x, w_packed, scale, bits, out=out, tile=tile)
    assert _rel_err(out, quantized_mm_ref(x, w_packed, scale, bits)) < _tolerance(dtype, bits, None)


@pytest.mark.parametrize("M", [37, 300])  # split-K tensor-core tile, then the plain one
def test_quantized_mm_tensor_core_tile_emulated(emulated_ops, M):
    torch.manual_seed(7)
    x = torch.randn(M, 96, dtype=torch.bfloat16)
    w_packed, scale, _ = quantize_weights(torch.randn(70, 96), 4)
    out = torch.full((M, 70), float("nan"), dtype=torch.bfloat16)
    qmm_ops.quantized_mm(x, w_packed, scale, 4, out=out, path="tensor_core")
    assert _rel_err(out, quantized_mm_ref(x, w_packed, scale, 4)) < _TOL[torch.bfloat16]


@pytest.mark.parametrize("dtype,M,IC,OC,G", [
    (torch.float16, 3, 256, 72, 32),
    (torch.bfloat16, 1, 256, 40, 128),
    (torch.float16, 17, 192, 24, 64),  # tensor-core tiles
    (torch.bfloat16, 2, 80, 16, -1),  # G = IC, IC % 32 != 0: padded K
    # G = 128 and G = IC = 256: whole K steps per group, the scales promoted onto the partial sums
    (torch.float16, 5, 384, 40, 128),
    (torch.bfloat16, 20, 256, 24, 128),  # tensor-core tiles
    (torch.float16, 9, 256, 16, -1),
])
@pytest.mark.parametrize("promote", [False, True], ids=["default", "promoted"])
def test_awq_gemm_emulated(emulated_ops, monkeypatch, dtype, M, IC, OC, G, promote):
    """promoted: AWQ's scales on the partial sums where the group allows it (not AWQ's default: measured slower)."""
    if promote:
        monkeypatch.setattr(qmm_ops, "use_promoted_scales",
                            lambda fmt_key, has_scales, group, x_dtype, tile:
                            promotes_scales(formats.format_by_key(fmt_key), has_scales, group))
    torch.manual_seed(M + IC)
    qweight, qzeros, scales = awq_quantize(torch.randn(IC, OC), G, scale_dtype=dtype)
    x = torch.randn(M, IC, dtype=dtype)
    out = torch.full((M, OC), float("nan"), dtype=dtype)
    awq_ops.awq_gemm(x, qweight, scales, qzeros, out=out)
    assert not out.isnan().any()
    assert _rel_err(out, awq_gemm_ref(x, qweight, scales, qzeros)) < _TOL[dtype]


@pytest.mark.parametrize("in_place", [True, False], ids=["fields_in_place", "shift_per_pair"])
@pytest.mark.parametrize("ct", [formats.F16, formats.BF16], ids=["f16", "bf16"])
def test_awq_zero_mma_decode_every_code_and_zero(ct, in_place):
    """awq_zmma: the decode gives M_j + u exactly and the correction operand -(M_j + z) of the same pair, so that
    the two MMAs sum (u - z) x: checked as decode + correction = u - z for every code and zero point."""
    fmt = formats.AWQ_ZERO_MMA
    for z, q, ctx, lo, hi, u_lo, u_hi in _awq_decoded_pairs(fmt, ct, in_place, 11):
        with simt.emulated(simt.Memory()):
            c_lo, c_hi = simt._halves(simt.u32(np.broadcast_to(fmt.correction(q, ct, ctx, in_place), simt.LANES)),
                                      ct.x2)
        magic = 2.0 ** (ct.mantissa - fmt.field_j(ct, q, in_place))
        assert np.array_equal(lo, u_lo + magic) and np.array_equal(hi, u_hi + magic), (z, q)
        assert np.array_equal(c_lo, np.full(simt.LANES, -(magic + z))) and np.array_equal(c_hi, c_lo), (z, q)
    with pytest.raises(NotImplementedError, match="promoted scales only"):
        fmt.correction(0, ct, (ctx[0], 1.0), in_place)


@pytest.mark.parametrize("dtype,M,IC,OC,G,in_place,ring", [
    (torch.float16, 1, 384, 72, 128, True, False),
    (torch.float16, 5, 256, 40, -1, False, True),
    (torch.bfloat16, 3, 384, 24, 128, True, False),  # bf16: one field in place, the rest shifted
    (torch.float16, 12, 512, 56, 128, True, False),  # two token tiles per warp
])
def test_awq_gemm_zero_mma_emulated(emulated_ops, monkeypatch, dtype, M, IC, OC, G, in_place, ring):
    """awq_zmma on the decode tiles (register pipeline and ring), promoted scales, against the float64 reference;
    x with a large common offset, so that the magic's share of the main MMA's sum (~M_j sum x) is large."""
    monkeypatch.setattr(awq_ops, "decode_format", lambda *a: "awq_zmma")
    torch.manual_seed(M + IC + OC)
    qweight, qzeros, scales = awq_quantize(torch.randn(IC, OC), G, scale_dtype=dtype)
    x = (torch.randn(M, IC) + 4.0).to(dtype)
    out = torch.full((M, OC), float("nan"), dtype=dtype)
    tile = dataclasses.replace(config.decode_tile("awq", M, OC, 132), fields_in_place=in_place)
    if ring:
        tile = dataclasses.replace(tile, stages=3, preload_weights=True, l2_prefetch_mb=0)
    awq_ops.awq_gemm(x, qweight, scales, qzeros, out=out, tile=tile)
    assert not out.isnan().any()
    assert _rel_err(out, awq_gemm_ref(x, qweight, scales, qzeros)) < _TOL[dtype]


@pytest.mark.parametrize("dtype,M,IC,OC,G", [(torch.float16, 3, 256, 72, 128), (torch.bfloat16, 13, 256, 40, 64),
                                              (torch.float16, 20, 384, 24, 128)])  # decode tiles, tensor-core tiles
def test_awq_bias_in_the_epilogue_emulated(emulated_ops, dtype, M, IC, OC, G):
    """awq_gemm's bias, added by the kernel's store in fp32 before the rounding (the emulation runs that store), and
    awq_linear passing it to the fused path; the dense path's addmm (CPU reference weight here)."""
    torch.manual_seed(M + OC)
    qweight, qzeros, scales = awq_quantize(torch.randn(IC, OC), G, scale_dtype=dtype)
    x = torch.randn(M, IC, dtype=dtype)
    bias = (torch.randn(OC) * 10).to(dtype)
    ref = awq_gemm_ref(x, qweight, scales, qzeros) + bias.double()
    out = torch.full((M, OC), float("nan"), dtype=dtype)
    awq_ops.awq_gemm(x, qweight, scales, qzeros, bias=bias, out=out)
    assert not out.isnan().any() and _rel_err(out, ref) < _TOL[dtype]
    for dense_min_tokens in (None, 1):  # fused, dense
        y = awq_ops.awq_linear(x.view(1, M, IC), qweight, scales, qzeros, bias, dense_min_tokens=dense_min_tokens)
        assert _rel_err(y.view(M, OC), ref) < _TOL[dtype]
    with pytest.raises(ValueError, match=r"^bias must have shape \[N\] = \[" + str(OC)):
        awq_ops.awq_gemm(x, qweight, scales, qzeros, bias=bias[:-8])
    with pytest.raises(TypeError, match="^bias"):
        awq_ops.awq_gemm(x, qweight, scales, qzeros, bias=bias.float())


@pytest.mark.parametrize("M,IC,OC,G", [(1, 256, 72, 32), (4, 384, 40, 128), (9, 256, 16, -1), (16, 512, 24, 64)])
def test_awq_gemm_one_fma_decode_emulated(emulated_ops, monkeypatch, M, IC, OC, G):
    """fp16 x with scales below 0.25 (AutoAWQ-sized weights): the decode tiles that fold the scale run awq_fma (with
    the parameter words off: since session 54 fp16 runs awq_zmma with them on these tiles,
    config.AWQ_PARAM_WORDS_WARPS_N)."""
    monkeypatch.setattr(config, "AWQ_PARAM_WORDS_WARPS_N", None)
    used = []
    launch = awq_ops.launch
    monkeypatch.setattr(awq_ops, "launch", lambda fmt_key, *a: (used.append(fmt_key), launch(fmt_key, *a))[1])
    torch.manual_seed(M + IC)
    qweight, qzeros, scales = awq_quantize(torch.randn(IC, OC) * 0.05, G, scale_dtype=torch.float16)
    x = torch.randn(M, IC, dtype=torch.float16)
    out = torch.full((M, OC), float("nan"), dtype=torch.float16)
    awq_ops.awq_gemm(x, qweight, scales, qzeros, out=out)
    assert used == ["awq_fma"]
    assert not out.isnan().any()
    assert _rel_err(out, awq_gemm_ref(x, qweight, scales, qzeros)) < _TOL[torch.float16]


@pytest.mark.parametrize("M,warps_n,ring", [(3, 4, False), (16, 2, False), (3, 4, True)])
def test_awq_gemm_side_by_side_warps_emulated(emulated_ops, M, warps_n, ring):
    """``ring``: the cp.async ring of config.AWQ_SIDE_BY_SIDE_RING (3 stages, preloaded, no L2 prefetch)."""
    torch.manual_seed(M * warps_n)
    qweight, qzeros, scales = awq_quantize(torch.randn(384, 72), 128, scale_dtype=torch.float16)
    x = torch.randn(M, 384, dtype=torch.float16)
    out = torch.full((M, 72), float("nan"), dtype=torch.float16)
    tile = dataclasses.replace(config.decode_tile("awq", M, 72, 132), warps_n=warps_n, warps_k=8 // warps_n)
    if ring:
        tile = dataclasses.replace(tile, stages=config.AWQ_SIDE_BY_SIDE_RING["stages"], preload_weights=True,
                                   l2_prefetch_mb=0)
    awq_ops.awq_gemm(x, qweight, scales, qzeros, out=out, tile=tile)
    assert _rel_err(out, awq_gemm_ref(x, qweight, scales, qzeros)) < _TOL[torch.float16]


@pytest.mark.parametrize("dtype,M,warps_n,warps_k", [(torch.float16, 1, 3, 8), (torch.bfloat16, 5, 7, 3),
                                                     (torch.float16, 8, 6, 4)])
def test_awq_gemm_one_cta_per_sm_tile_emulated(emulated_ops, dtype, M, warps_n, warps_k):
    """The tile shape of config.one_cta_per_sm_warps (odd warps side by side, more than 256 threads) forced on a
    small layer: 72 rows (5 row tiles: a partial CTA, a half tile), 1280 K values (10 K steps over 3-8 warps, some
    warps without a step or with one more). The emulator restates the K loop and the epilogue (weight_only_simt.py),
    so this checks the per-thread code under those shapes; the GPU tier (test_awq_one_cta_per_sm_tile) the kernel."""
    torch.manual_seed(M * warps_n)
    qweight, qzeros, scales = awq_quantize(torch.randn(1280, 72) * 0.05, 128, scale_dtype=dtype)
    x = torch.randn(M, 1280, dtype=dtype)
    out = torch.full((M, 72), float("nan"), dtype=dtype)
    tile = dataclasses.replace(config.decode_tile("awq", M, 72, 132), warps_n=warps_n, warps_k=warps_k)
    awq_ops.awq_gemm(x, qweight, scales, qzeros, out=out, tile=tile)
    assert not out.isnan().any()
    assert _rel_err(out, awq_gemm_ref(x, qweight, scales, qzeros)) < _TOL[dtype]


def test_awq_repack_is_cached_and_invalidated(emulated_ops):
    from cute_kernels.weight_only import awq_repack

    qweight, qzeros, scales = awq_quantize(torch.randn(64, 16), 32)
    awq_repack.clear_cache()
    a = awq_repack.kernel_weights(qweight, scales, qzeros, 32)
    assert awq_repack.kernel_weights(qweight, scales, qzeros, 32) is a
    qweight.add_(0)  # an in-place update bumps the version: the copy must be rebuilt
    assert awq_repack.kernel_weights(qweight, scales, qzeros, 32) is not a
