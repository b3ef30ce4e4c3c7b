"""CPU tests of the host-side quantization formats: bit layouts by hand, round trips, quantizer error bounds, errors."""

import pytest
import torch

from cute_kernels.formats import (awq_dequantize_reference, awq_pack, awq_quantize, awq_unpack, check_awq_tensors,
                                  dequantize_fp8_blockwise, dequantize_fp8_per_token_group, dequantize_weights,
                                  describe_scale_layouts, is_mn_major, make_scale_factor_layout, pack_weights,
                                  quantize_fp8_blockwise, quantize_fp8_per_token_group, quantize_weights,
                                  scale_factor_layout, smem_atom_layout, to_mn_major,
                                  to_tma_aligned_mn_major, unpack_weights)

BITS = (1, 2, 4, 8)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- 1/2/4/8-bit packed weights

@pytest.mark.parametrize("bits", BITS)
def test_every_byte_value_round_trips(bits):
    """Each of the 256 bytes is a valid packing for every width: unpack then pack must give it back."""
    packed = torch.arange(256, dtype=torch.uint8).reshape(256, 1)
    vals = unpack_weights(packed, bits, 8 // bits)
    assert vals.dtype == torch.int8 and vals.shape == (256, 8 // bits)
    assert torch.equal(pack_weights(vals, bits), packed)


@pytest.mark.parametrize("bits", BITS)
def test_decode_rule_per_value(bits):
    """unpack follows the seed's decode for every byte and every index (checked one value at a time)."""
    packed = torch.arange(256, dtype=torch.uint8).reshape(256, 1)
    vals = unpack_weights(packed, bits, 8 // bits)
    for byte in range(256):
        for i in range(8 // bits):
            if bits == 8:
                want = byte - 256 if byte >= 128 else byte
            elif bits == 4:
                nib = (byte >> 4) if i & 1 else (byte & 0xF)
                want = nib - 16 if nib & 8 else nib
            elif bits == 2:
                want = ((byte >> (2 * (i % 4))) & 3) - 2
            else:
                want = 1 if (byte >> (i % 8)) & 1 else -1
            assert int(vals[byte, i]) == want, (bits, byte, i)


def test_hand_packed_examples():
    four = pack_weights(torch.tensor([[1, -2, 7, -8, 0, -1, 3, 4]], dtype=torch.int8), 4)
    assert four.tolist() == [[0xE1, 0x87, 0xF0, 0x43]]
    assert pack_weights(torch.tensor([[-2, -1, 0, 1]]), 2).tolist() == [[0xE4]]
    assert pack_weights(torch.tensor([[1, -1, -1, -1, -1, -1, -1, 1]]), 1).tolist() == [[0x81]]
    assert pack_weights(torch.tensor([[-1, 127, -128]]), 8).tolist() == [[0xFF, 0x7F, 0x80]]
    # 2-bit: 00=-2, 01=-1, 10=0, 11=1; value i sits at bits 2i..2i+1.
    assert unpack_weights(torch.tensor([[0b00_01_10_11]], dtype=torch.uint8), 2, 4).tolist() == [[1, 0, -1, -2]]
    # Row n of the packed tensor is weight row n.
    two_rows = pack_weights(torch.tensor([[1, 1], [-1, -1]]).repeat(1, 4), 1)
    assert two_rows.tolist() == [[0xFF], [0x00]]


@pytest.mark.parametrize("bits", BITS)
def test_random_round_trip_multi_row(bits):
    lo, hi = {1: (-1, 1), 2: (-2, 1), 4: (-8, 7), 8: (-128, 127)}[bits]
    w = torch.randint(lo, hi + 1, (5, 64), generator=gen(bits), dtype=torch.int32)
    if bits == 1:
        w = torch.where(w >= 0, 1, -1)
    packed = pack_weights(w, bits)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 64 * bits // 8) and packed.is_contiguous()
    assert torch.equal(unpack_weights(packed, bits, 64), w.to(torch.int8))


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("group", [None, 32, 64])
def test_quantize_dequantize_error_bound(bits, group):
    N, K = 16, 128
    w = torch.randn(N, K, generator=gen(1))
    packed, scale, gs = quantize_weights(w, bits, group)
    assert packed.shape == (N, K * bits // 8)
    if group is None:
        assert gs is None and isinstance(scale, float)
        assert scale == float(torch.tensor(scale, dtype=torch.float32))  # exactly a float32, like the seed's config
    else:
        assert scale == 1.0 and gs.dtype == torch.float32 and gs.shape == (N, K // group)
    deq = dequantize_weights(packed, bits, K, scale, gs)
    assert deq.dtype == torch.float32 and deq.shape == (N, K)
    s = torch.full((N, K), scale) if gs is None else gs.repeat_interleave(group, dim=1)
    if bits == 1:
        assert torch.equal(torch.sign(deq), torch.where(w >= 0, 1.0, -1.0))
        # scale = mean|w| over the tensor/group
        ref = w.abs().mean() if group is None else w.abs().reshape(N, K // group, group).mean(-1)
        torch.testing.assert_close(torch.tensor(scale) if group is None else gs, ref)
    else:
        # round to nearest on the grid: error at most half a step (plus float32 rounding)
        assert bool(((deq - w).abs() <= s * 0.5 * (1 + 1e-5)).all())
        qmax = 2 ** (bits - 1) - 1
        amax = w.abs().amax() if group is None else w.abs().reshape(N, K // group, group).amax(-1)
        torch.testing.assert_close(torch.tensor(scale) if group is None else gs, amax / qmax)


def test_quantize_zero_tensor_and_group():
    w = torch.zeros(4, 64)
    w[0, :32] = torch.linspace(-1, 1, 32)
    for bits in BITS:
        packed, scale, gs = quantize_weights(w, bits, 32)
        assert bool(torch.isfinite(gs).all()) and float(gs[0, 0]) > 0
        assert torch.equal(gs[1:], torch.zeros(3, 2)) and float(gs[0, 1]) == 0.0
        deq = dequantize_weights(packed, bits, 64, scale, gs)
        assert torch.equal(deq[1:], torch.zeros(3, 64)) and torch.equal(deq[0, 32:], torch.zeros(32))
    for bits in BITS:
        packed, scale, _ = quantize_weights(torch.zeros(2, 8), bits)
        assert scale == 0.0 and torch.equal(dequantize_weights(packed, bits, 8, scale), torch.zeros(2, 8))


def test_bitpack_errors():
    w4 = torch.zeros(2, 8, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"bits must be one of \(1, 2, 4, 8\); got 3"):
        pack_weights(w4, 3)
    with pytest.raises(ValueError, match="bits must be one of"):
        unpack_weights(torch.zeros(2, 4, dtype=torch.uint8), 16, 8)
    with pytest.raises(ValueError, match="bits must be one of"):
        quantize_weights(torch.zeros(2, 8), True)
    with pytest.raises(ValueError, match=r"K \(w_int.shape\[1\]\) = 6 must be a positive multiple of 4"):
        pack_weights(torch.zeros(2, 6, dtype=torch.int8), 2)
    with pytest.raises(ValueError, match=r"w_int values must be in \[-8, 7\] for bits=4; got 8 at index \(1, 3\)"):
        bad = w4.clone()
        bad[1, 3] = 8
        pack_weights(bad, 4)
    with pytest.raises(ValueError, match=r"in \[-2, 1\] for bits=2; got 2"):
        pack_weights(torch.full((1, 4), 2), 2)
    with pytest.raises(ValueError, match=r"exactly -1 or \+1 .* got 0 at index \(0, 0\)"):
        pack_weights(torch.zeros(1, 8, dtype=torch.int32), 1)
    with pytest.raises(TypeError, match="w_int must have dtype int8, int16, int32, int64; got float32"):
        pack_weights(torch.zeros(2, 8), 4)
    with pytest.raises(ValueError, match="w_int must be 2-D; got a 1-D tensor"):
        pack_weights(torch.zeros(8, dtype=torch.int8), 4)
    with pytest.raises(TypeError, match="packed must have dtype uint8; got int8"):
        unpack_weights(torch.zeros(2, 4, dtype=torch.int8), 4, 8)
    with pytest.raises(ValueError, match=r"packed must have shape \[N, K \* bits / 8\] = \[2, 4\] for K = 8"):
        unpack_weights(torch.zeros(2, 5, dtype=torch.uint8), 4, 8)
    with pytest.raises(ValueError, match="K = 7 must be a positive multiple of 2"):
        unpack_weights(torch.zeros(2, 4, dtype=torch.uint8), 4, 7)
    with pytest.raises(ValueError, match="group must be None or a positive multiple of 32 that divides K = 64; got 16"):
        quantize_weights(torch.zeros(2, 64), 4, 16)
    with pytest.raises(ValueError, match="divides K = 64; got 96"):
        quantize_weights(torch.zeros(2, 64), 4, 96)
    with pytest.raises(ValueError, match="w_float must be finite"):
        quantize_weights(torch.tensor([[float("nan")] * 8]), 4)
    with pytest.raises(TypeError, match="w_float must have dtype"):
        quantize_weights(torch.zeros(2, 8, dtype=torch.int32), 4)
    with pytest.raises(TypeError, match="w_int must be a torch.Tensor"):
        pack_weights([[1, 2]], 4)
    packed = torch.zeros(2, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"group_scales must have shape \[N, K / group\] = \[2, K / group\] .*\(2, 3\)"):
        dequantize_weights(packed, 4, 64, 1.0, torch.ones(2, 3))
    with pytest.raises(ValueError, match="group a multiple of 32"):
        dequantize_weights(packed, 4, 64, 1.0, torch.ones(2, 4))  # group 16
    with pytest.raises(TypeError, match="group_scales must have dtype float32; got float16"):
        dequantize_weights(packed, 4, 64, 1.0, torch.ones(2, 2, dtype=torch.float16))


# ---------------------------------------------------------------- AWQ

def test_awq_nibble_order_by_hand():
    ones = torch.ones(1, 8, dtype=torch.float16)
    zeros = torch.zeros(1, 8, dtype=torch.int32)
    # slot p holds column order_map[p] = [0, 2, 4, 6, 1, 3, 5, 7]: columns 0..7 = 0..7 -> nibbles 0,2,4,6,1,3,5,7
    q, qz, _ = awq_pack(torch.arange(8).reshape(1, 8), torch.arange(8).reshape(1, 8), ones, 1)
    assert q.dtype == torch.int32 and q.tolist() == [[0x75316420]] and qz.tolist() == [[0x75316420]]
    q, _, _ = awq_pack(torch.tensor([[15, 0, 0, 0, 0, 0, 0, 1]]), zeros, ones, 1)
    assert q.tolist() == [[0x1000000F]]
    # column 1 lives in slot 4 (bits 16..19); column 7 = 8 sets the sign bit of the int32
    q, _, _ = awq_pack(torch.tensor([[0, 9, 0, 0, 0, 0, 0, 8]]), zeros, ones, 1)
    assert q.tolist() == [[0x80090000 - 2**32]]
    w, z = awq_unpack(torch.tensor([[0x80090000 - 2**32]], dtype=torch.int32),
                      torch.tensor([[0x75316420]], dtype=torch.int32))
    assert w.tolist() == [[0, 9, 0, 0, 0, 0, 0, 8]] and z.tolist() == [list(range(8))]
    # second int32 of a row covers columns 8..15
    q, _, _ = awq_pack(torch.tensor([[0] * 8 + [1, 0, 0, 0, 0, 0, 0, 0]]), torch.zeros(1, 16, dtype=torch.int32),
                       torch.ones(1, 16, dtype=torch.float16), 1)
    assert q.tolist() == [[0, 1]]


def test_awq_unpack_matches_vllm_shift_rule():
    """vLLM's awq_triton unpacks column 8j+c with (word >> [0, 16, 4, 20, 8, 24, 12, 28][c]) & 0xF."""
    words = torch.randint(-2**31, 2**31 - 1, (3, 4), generator=gen(2), dtype=torch.int64).to(torch.int32)
    w, _ = awq_unpack(words, words[:1])
    shifts = [0, 16, 4, 20, 8, 24, 12, 28]
    for r in range(3):
        for j in range(4):
            u = int(words[r, j]) & 0xFFFFFFFF
            assert [int(w[r, 8 * j + c]) for c in range(8)] == [(u >> s) & 0xF for s in shifts]


@pytest.mark.parametrize("G", [32, 64, 128, 256])
def test_awq_pack_unpack_round_trip(G):
    IC, OC = 256, 48
    iw = torch.randint(0, 16, (IC, OC), generator=gen(3))
    z = torch.randint(0, 16, (IC // G, OC), generator=gen(4))
    s = torch.rand(IC // G, OC, generator=gen(5)).to(torch.bfloat16)
    qweight, qzeros, scales = awq_pack(iw, z, s, G)
    assert qweight.shape == (IC, OC // 8) and qzeros.shape == (IC // G, OC // 8)
    assert check_awq_tensors(qweight, scales, qzeros) == (IC, OC, G)
    w2, z2 = awq_unpack(qweight, qzeros)
    assert torch.equal(w2, iw.to(torch.int32)) and torch.equal(z2, z.to(torch.int32))
    deq = awq_dequantize_reference(qweight, scales, qzeros)
    assert deq.dtype == torch.bfloat16 and deq.shape == (IC, OC)
    for i, o in [(0, 0), (IC - 1, OC - 1), (G % IC, 9), (IC // 2 + 3, 17)]:
        want = (int(iw[i, o]) - int(z[i // G, o])) * float(s[i // G, o])
        assert float(deq[i, o]) == float(torch.tensor(want, dtype=torch.float32).to(torch.bfloat16))


@pytest.mark.parametrize("G", [32, 128, -1])
@pytest.mark.parametrize("scale_dtype", [torch.float16, torch.bfloat16])
def test_awq_quantize_error_bound(G, scale_dtype):
    IC, OC = 256, 64
    w = torch.randn(IC, OC, generator=gen(6))
    qweight, qzeros, scales = awq_quantize(w, G, scale_dtype)
    g = IC if G == -1 else G
    assert scales.dtype == scale_dtype and scales.shape == (IC // g, OC)
    deq = awq_dequantize_reference(qweight, scales, qzeros).float()
    step = scales.float().repeat_interleave(g, dim=0)
    # min/max asymmetric: |error| <= one step (half a step of rounding, plus the rounded zero point)
    assert bool(((deq - w).abs() <= step * 1.01).all())
    assert float((deq - w).abs().mean()) < 0.3 * float(step.mean())


def test_awq_errors():
    ones = torch.ones(1, 8, dtype=torch.float16)
    zeros = torch.zeros(1, 8, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"int_weight values must be unsigned 4-bit \(0..15\); got min 0, max 16"):
        awq_pack(torch.tensor([[16, 0, 0, 0, 0, 0, 0, 0]]), zeros, ones, 1)
    with pytest.raises(ValueError, match=r"zeros values must be unsigned 4-bit .* got min -1"):
        awq_pack(torch.zeros(1, 8, dtype=torch.int32), zeros - 1, ones, 1)
    with pytest.raises(ValueError, match=r"OC = 12 \(int_weight.shape\[1\]\) must be a positive multiple of 8"):
        awq_pack(torch.zeros(1, 12, dtype=torch.int32), torch.zeros(1, 12, dtype=torch.int32),
                 torch.ones(1, 12, dtype=torch.half), 1)
    with pytest.raises(ValueError, match="IC = 96 must be a multiple of group_size = 64"):
        awq_pack(torch.zeros(96, 8, dtype=torch.int32), zeros, ones, 64)
    with pytest.raises(ValueError, match=r"zeros must have shape \(2, 8\) \(\[IC / group_size, OC\]\); got \(1, 8\)"):
        awq_pack(torch.zeros(64, 8, dtype=torch.int32), zeros, ones, 32)
    with pytest.raises(TypeError, match="scales must have dtype float16, bfloat16; got float32"):
        awq_pack(torch.zeros(1, 8, dtype=torch.int32), zeros, ones.float(), 1)
    with pytest.raises(ValueError, match="group_size must be a positive int or -1"):
        awq_quantize(torch.zeros(64, 8), 0)

    qweight, qzeros, scales = awq_quantize(torch.randn(128, 16, generator=gen(7)), 32)
    with pytest.raises(TypeError, match="qweight must have dtype int32; got int64"):
        awq_dequantize_reference(qweight.long(), scales, qzeros)
    with pytest.raises(ValueError, match="qweight must be contiguous"):
        awq_dequantize_reference(torch.zeros(2, 128, dtype=torch.int32).t(), scales, qzeros)
    with pytest.raises(ValueError, match="qzeros must be contiguous"):
        awq_unpack(qweight, torch.zeros(2, 4, dtype=torch.int32).t())
    with pytest.raises(ValueError, match=r"scales.shape\[0\] = 3 \(IC / G\) must divide IC = qweight.shape\[0\] = 128"):
        awq_dequantize_reference(qweight, torch.ones(3, 16, dtype=torch.half), qzeros)
    with pytest.raises(ValueError, match=r"scales must have shape \[IC / G, OC\] with OC = 8 \* qweight.shape\[1\] = 16;"):
        awq_dequantize_reference(qweight, torch.ones(4, 24, dtype=torch.half), qzeros)
    with pytest.raises(ValueError, match=r"qzeros must have shape \(4, 2\)"):
        awq_dequantize_reference(qweight, scales, torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"qzeros must have OC / 8 = qweight.shape\[1\] = 2 columns"):
        awq_unpack(qweight, torch.zeros(4, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"qzeros.shape\[0\] = 3 \(IC / G\) must divide IC = 128"):
        awq_unpack(qweight, torch.zeros(3, 2, dtype=torch.int32))
    with pytest.raises(TypeError, match="scale_dtype must be float16 or bfloat16"):
        awq_quantize(torch.zeros(64, 8), 32, torch.float32)


# ---------------------------------------------------------------- FP8

@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_per_token_group_round_trip(dtype):
    fmax = torch.finfo(dtype).max
    x = torch.randn(2, 5, 384, generator=gen(8)) * torch.logspace(-3, 3, 5).reshape(1, 5, 1)
    x[0, 1, 128:256] = 0  # an all-zero group must not produce inf/nan
    q, s = quantize_fp8_per_token_group(x, 128, dtype)
    assert q.dtype == dtype and q.shape == x.shape and s.dtype == torch.float32 and s.shape == (2, 5, 3)
    amax = x.abs().reshape(2, 5, 3, 128).amax(-1)
    torch.testing.assert_close(s, amax.clamp(min=1e-10) / fmax)
    assert bool(torch.isfinite(q.float()).all())
    # the largest element of each group hits +-fp8_max exactly
    assert bool((q.float().abs().reshape(2, 5, 3, 128).amax(-1)[amax > 0] == fmax).all())
    deq = dequantize_fp8_per_token_group(q, s, 128)
    rel = 2.0 ** -4 if dtype == torch.float8_e4m3fn else 2.0 ** -3  # half an ulp of a 3-bit / 2-bit mantissa
    err = (deq - x).abs()
    half_subnormal = 2.0 ** -10 if dtype == torch.float8_e4m3fn else 2.0 ** -17
    bound = rel * x.abs() + s.repeat_interleave(128, -1) * half_subnormal
    assert bool((err <= bound * 1.001).all())
    assert torch.equal(deq[0, 1, 128:256], torch.zeros(128))


def test_fp8_blockwise_round_trip_and_partial_blocks():
    w = torch.randn(300, 200, generator=gen(9))
    q, s = quantize_fp8_blockwise(w, 128)
    assert q.shape == (300, 200) and s.shape == (3, 2)
    for bn in range(3):
        for bk in range(2):
            tile = w[bn * 128:(bn + 1) * 128, bk * 128:(bk + 1) * 128]
            assert float(s[bn, bk]) == pytest.approx(float(tile.abs().max()) / 448.0, rel=1e-6)
    deq = dequantize_fp8_blockwise(q, s, 128)
    s_elem = s.repeat_interleave(128, 0)[:300].repeat_interleave(128, 1)[:, :200]
    assert bool(((deq - w).abs() <= 2.0 ** -4 * w.abs() + s_elem * 2.0 ** -10).all())
    qb, sb = quantize_fp8_blockwise(w.reshape(2, 150, 200), (64, 128))
    assert sb.shape == (2, 3, 2)
    torch.testing.assert_close(dequantize_fp8_blockwise(qb, sb, (64, 128)), w.reshape(2, 150, 200),
                               rtol=0.07, atol=0.02)


def test_fp8_errors():
    with pytest.raises(TypeError, match="dtype must be float8_e4m3fn or float8_e5m2; got torch.int8"):
        quantize_fp8_per_token_group(torch.zeros(2, 128), 128, torch.int8)
    with pytest.raises(ValueError, match="group must be a positive int; got 0"):
        quantize_fp8_per_token_group(torch.zeros(2, 128), 0)
    with pytest.raises(ValueError, match=r"x must be at least 2-D \(\[..., rows, K\]\); got shape \(128,\)"):
        quantize_fp8_per_token_group(torch.zeros(128))
    with pytest.raises(ValueError, match="w must be finite"):
        quantize_fp8_blockwise(torch.full((2, 2), float("inf")))
    with pytest.raises(TypeError, match="x must have dtype"):
        quantize_fp8_per_token_group(torch.zeros(2, 128, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"block must be an int or a \(rows, cols\) pair"):
        quantize_fp8_blockwise(torch.zeros(2, 2), (1, 2, 3))
    q, s = quantize_fp8_per_token_group(torch.ones(4, 256))
    with pytest.raises(ValueError, match=r"scale must have shape \(4, 2\) \(\[..., M, ceil\(K / 128\)\].*\(4, 1\)"):
        dequantize_fp8_per_token_group(q, s[:, :1])
    with pytest.raises(TypeError, match="q must have dtype float8_e4m3fn, float8_e5m2; got float32"):
        dequantize_fp8_blockwise(q.float(), s)
    with pytest.raises(TypeError, match="scale must have dtype float32; got float16"):
        dequantize_fp8_per_token_group(q, s.half())


# ---------------------------------------------------------------- scale-factor layouts

def test_scale_layout_seed_examples():
    # The seed's example: M=256, N=512, K=1024, TileShape 128x128x128.
    assert scale_factor_layout("A", 256, 1024, (1, 128, 128)) == "((_1,256),(_128,8),1):((_0,_1),(_0,256),2048)"
    assert scale_factor_layout("B", 512, 1024, (1, 128, 128)) == "((_128,4),(_128,8),1):((_0,_1),(_0,4),32)"
    assert scale_factor_layout("A", 256, 1024, "blockwise") == "((_128,2),(_128,8),1):((_0,_1),(_0,2),16)"
    assert scale_factor_layout("SFB", 512, 1024, (128, 128, 128)) == "((_128,4),(_128,8),1):((_0,_1),(_0,4),32)"
    assert smem_atom_layout("A", (128, 128, 128), "groupwise") == "((_1,_128),(_128,_1)):((_0,_1),(_0,_128))"
    assert smem_atom_layout("B", (128, 128, 128), "groupwise") == "((_128,_1),(_128,_1)):((_0,_1),(_0,_1))"
    tile = (128, 128, 128)
    assert smem_atom_layout("A", tile, "blockwise", stages=4) == "((_128,_1),(_128,_1),_4):((_0,_1),(_0,_1),_1)"
    assert smem_atom_layout("A", tile, "groupwise", stages=4) == "((_1,_128),(_128,_1),_4):((_0,_1),(_0,_128),_128)"


def test_scale_layout_partial_batched_and_k_major():
    assert scale_factor_layout("A", 200, 300, "blockwise", L=3) == "((_128,2),(_128,3),3):((_0,_1),(_0,2),6)"
    assert scale_factor_layout("A", 256, 1024, "groupwise", major="K") == "((_1,256),(_128,8),1):((_0,8),(_0,_1),2048)"
    text = describe_scale_layouts(256, 512, 1024, "groupwise")
    assert "((_1,256),(_128,8),1):((_0,_1),(_0,256),2048)" in text and "((_128,4),(_128,8),1)" in text


@pytest.mark.parametrize("major", ["MN", "K"])
@pytest.mark.parametrize("gran,kind", [("groupwise", "A"), ("blockwise", "A"), ("blockwise", "B"), ((2, 64, 32), "A")])
def test_scale_layout_addresses_the_torch_scale_tensor(major, gran, kind):
    """layout(m, k, l) is the storage offset of scale[l, m // g, k // gK] in the MN- or K-major torch tensor."""
    L, R, K = 2, 130, 300
    lay = make_scale_factor_layout(kind, R, K, gran, L=L, major=major)
    (_, n_mn), (gk, n_k), _ = lay.shape_values
    g_mn = lay.shape_values[0][0]
    scale = torch.arange(L * n_mn * n_k, dtype=torch.float32).reshape(L, n_mn, n_k)
    if major == "MN":
        scale = to_mn_major(scale)
        assert is_mn_major(scale)
    else:
        assert not is_mn_major(scale)
    for m in (0, 1, g_mn, R - 1):
        for k in (0, gk - 1, gk, K - 1):
            for l in range(L):
                idx = (l, m // g_mn, k // gk)
                want = sum(i * s for i, s in zip(idx, scale.stride()))
                assert lay.offset(m, k, l) == want


@pytest.mark.parametrize("shape", [(5, 3), (8, 3), (1, 4), (2, 65, 56)])
def test_tma_aligned_mn_major(shape):
    """Same values as the input, MN-major, column (and batch) strides multiples of 4 floats: what
    fp8_blockwise_scaled_mm stages with TMA at any M (its eligibility rule run on the result)."""
    from cute_kernels.ops.fp8_blockwise_scaled_mm import sfa_tma_eligible

    x = torch.randn(shape)
    y = to_tma_aligned_mn_major(x)
    assert torch.equal(x, y) and y.stride(-2) == 1 and y.stride(-1) == -(-shape[-2] // 4) * 4
    assert all(st % 4 == 0 for i, st in enumerate(y.stride()) if i != y.dim() - 2)
    assert sfa_tma_eligible(y, (1, 128, 128))
    assert sfa_tma_eligible(to_mn_major(x), (1, 128, 128)) == (shape[-2] % 4 == 0)


def test_scale_layout_errors():
    with pytest.raises(ValueError, match="kind must be 'A' .* or 'B' .*; got 'C'"):
        scale_factor_layout("C", 256, 1024)
    with pytest.raises(ValueError, match=r"granularity must be 'groupwise', 'blockwise' or a \(gM, gN, gK\) .*'rowwise'"):
        scale_factor_layout("A", 256, 1024, "rowwise")
    with pytest.raises(ValueError, match=r"granularity\[2\] must be a positive int; got 0"):
        scale_factor_layout("A", 256, 1024, (1, 128, 0))
    with pytest.raises(ValueError, match="M_or_N must be a positive int; got 0"):
        scale_factor_layout("A", 0, 1024)
    with pytest.raises(ValueError, match="major must be 'MN'"):
        scale_factor_layout("A", 256, 1024, major="row")


def _cute_eval(shape, stride, coords):
    """Build the layout with the real CuTe DSL (all-static) and return (str, [crd2idx(c) for c in coords])."""
    import cutlass
    import cutlass.cute as cute

    @cute.jit
    def build(shape: cutlass.Constexpr, stride: cutlass.Constexpr, coords: cutlass.Constexpr, sink: cutlass.Constexpr):
        layout = cute.make_layout(shape, stride=stride)
        sink.append(str(layout))
        for c in coords:
            sink.append(cute.crd2idx(c, layout))

    sink = []
    build(shape, stride, coords, sink)
    return sink[0], [int(v) for v in sink[1:]]


@pytest.mark.parametrize("args", [("A", 256, 1024, "groupwise", 1, "MN"), ("B", 512, 1024, "groupwise", 1, "MN"),
                                  ("A", 200, 300, "blockwise", 3, "MN"), ("A", 130, 300, (2, 64, 32), 2, "K")])
def test_scale_layout_agrees_with_cute(args):
    """CuTe itself prints the same layout (it writes static ints without the C++ underscore) and maps element
    coordinates to the same offsets as ScaleFactorLayout.offset."""
    pytest.importorskip("cutlass.cute")
    kind, mn, K, gran, L, major = args
    lay = make_scale_factor_layout(kind, mn, K, gran, L=L, major=major)
    coords = [(m, k, l) for m in (0, 1, mn // 2, mn - 1) for k in (0, 127, 128, K - 1) for l in range(L)]
    text, offsets = _cute_eval(lay.shape_values, lay.stride_values, coords)
    assert text == str(lay).replace("_", "")
    assert offsets == [lay.offset(*c) for c in coords]
