"""The float64 references against naive scalar loops on tiny shapes (CPU)."""

import pytest
import torch

from cute_kernels.formats import (awq_quantize, awq_unpack, pack_weights, quantize_fp8_blockwise,
                                  quantize_fp8_per_token_group)
from cute_kernels.formats.scale_layouts import to_mn_major
from cute_kernels.reference import (awq_gemm_ref, fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref,
                                    quantized_matmul_reduce_scatter_ref, quantized_mm_ref)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def naive_fp8_mm(a, b, sa, sb, gM, gN, gK):
    M, K = a.shape
    N = b.shape[0]
    out = torch.zeros(M, N, dtype=torch.float64)
    for i in range(M):
        for j in range(N):
            total = 0.0
            for kb in range(-(-K // gK)):
                part = sum(float(a[i, k]) * float(b[j, k]) for k in range(kb * gK, min(K, (kb + 1) * gK)))
                total += float(sa[i // gM, kb]) * float(sb[j // gN, kb]) * part
            out[i, j] = total
    return out


@pytest.mark.parametrize("gran", [(1, 8, 8), (4, 8, 8), (2, 3, 5)])
def test_fp8_blockwise_ref_matches_loop(gran):
    gM, gN, gK = gran
    M, N, K = 5, 7, 19  # partial blocks in every dimension
    a = torch.randn(M, K, generator=gen(0)).to(torch.float8_e4m3fn)
    b = torch.randn(N, K, generator=gen(1)).to(torch.float8_e4m3fn)
    KB = -(-K // gK)
    sa = torch.rand(-(-M // gM), KB, generator=gen(2)) + 0.5
    sb = torch.rand(-(-N // gN), KB, generator=gen(3)) + 0.5
    out = fp8_blockwise_scaled_mm_ref(a, b, sa, sb, gran)
    assert out.dtype == torch.float64 and out.shape == (M, N)
    torch.testing.assert_close(out, naive_fp8_mm(a, b, sa, sb, gM, gN, gK), rtol=1e-12, atol=1e-12)
    # MN-major scales are the same values: same result
    assert torch.equal(fp8_blockwise_scaled_mm_ref(a, b, to_mn_major(sa), to_mn_major(sb), gran), out)


def test_fp8_blockwise_ref_batched_and_quantizer_consistency():
    L, M, N, K = 2, 4, 3, 256
    x = torch.randn(L, M, K, generator=gen(4))
    w = torch.randn(L, N, K, generator=gen(5))
    qa, sa = quantize_fp8_per_token_group(x, 128)
    qb, sb = quantize_fp8_blockwise(w, 128)
    out = fp8_blockwise_scaled_mm_ref(qa, qb, sa, sb, (1, 128, 128))
    assert out.shape == (L, M, N)
    for l in range(L):
        torch.testing.assert_close(out[l], naive_fp8_mm(qa[l], qb[l], sa[l], sb[l], 1, 128, 128), rtol=1e-12, atol=1e-9)
    # and it approximates the unquantized product (fp8 e4m3: ~2^-4 relative per element)
    torch.testing.assert_close(out, torch.matmul(x.double(), w.double().transpose(-1, -2)), rtol=0.1, atol=1.5)


def test_fp8_blockwise_ref_errors():
    a = torch.zeros(4, 256, dtype=torch.float8_e4m3fn)
    b = torch.zeros(8, 256, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"a_scale must have shape \(4, 2\) .* got \(4, 1\)"):
        fp8_blockwise_scaled_mm_ref(a, b, torch.ones(4, 1), torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"b_scale must have shape \(1, 2\) .* got \(8, 2\)"):
        fp8_blockwise_scaled_mm_ref(a, b, torch.ones(4, 2), torch.ones(8, 2))
    with pytest.raises(ValueError, match=r"b must have shape \[\(L,\) N, K\] with K = 256"):
        fp8_blockwise_scaled_mm_ref(a, b[:, :128], torch.ones(4, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="a and b must both be 2-D"):
        fp8_blockwise_scaled_mm_ref(a, b[None], torch.ones(4, 2), torch.ones(1, 2))


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("grouped", [False, True])
def test_quantized_mm_ref_matches_loop(bits, grouped):
    M, N, K = 3, 4, 64
    lo, hi = {1: (-1, 1), 2: (-2, 1), 4: (-8, 7), 8: (-128, 127)}[bits]
    w = torch.randint(lo, hi + 1, (N, K), generator=gen(bits))
    if bits == 1:
        w = torch.where(w > 0, 1, -1)
    packed = pack_weights(w, bits)
    x = torch.randn(M, K, generator=gen(10))
    scale = 0.37
    gs = torch.rand(N, K // 32, generator=gen(11)) + 0.5 if grouped else None
    out = quantized_mm_ref(x, packed, scale, bits, gs)
    assert out.dtype == torch.float64 and out.shape == (M, N)
    want = torch.zeros(M, N, dtype=torch.float64)
    for m in range(M):
        for n in range(N):
            want[m, n] = sum(float(x[m, k]) * int(w[n, k]) * scale * (float(gs[n, k // 32]) if grouped else 1.0)
                             for k in range(K))
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("G", [32, 64])
def test_awq_gemm_ref_matches_loop(G):
    M, IC, OC = 2, 64, 16
    qweight, qzeros, scales = awq_quantize(torch.randn(IC, OC, generator=gen(12)), G)
    q, z = awq_unpack(qweight, qzeros)
    x = torch.randn(M, IC, generator=gen(13)).half()
    out = awq_gemm_ref(x, qweight, scales, qzeros)
    assert out.dtype == torch.float64 and out.shape == (M, OC)
    want = torch.zeros(M, OC, dtype=torch.float64)
    for m in range(M):
        for o in range(OC):
            want[m, o] = sum(float(x[m, i]) * (int(q[i, o]) - int(z[i // G, o])) * float(scales[i // G, o])
                             for i in range(IC))
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"x must have IC = qweight.shape\[0\] = 64 columns"):
        awq_gemm_ref(x[:, :32], qweight, scales, qzeros)


def test_reduce_scatter_ref_matches_loop():
    world, M, N, Kr = 2, 4, 3, 5
    x1 = [torch.randint(-128, 128, (M, Kr), generator=gen(20 + r), dtype=torch.int8) for r in range(world)]
    x2 = [torch.randint(-128, 128, (Kr, N), generator=gen(30 + r), dtype=torch.int8) for r in range(world)]
    s1 = torch.rand(M, generator=gen(40))
    s2 = torch.rand(N, generator=gen(41))
    bias = torch.randint(-1000, 1000, (N,), generator=gen(42), dtype=torch.int32)
    outs = quantized_matmul_reduce_scatter_ref(x1, x2, s1, s2, bias, world)
    assert len(outs) == world and all(o.shape == (M // world, N) and o.dtype == torch.float64 for o in outs)
    for r in range(world):
        for i in range(M // world):
            row = r * (M // world) + i
            for j in range(N):
                acc = sum(int(x1[q][row, k]) * int(x2[q][k, j]) for q in range(world) for k in range(Kr))
                want = (acc + int(bias[j])) * float(s1[row]) * float(s2[j])
                assert float(outs[r][i, j]) == pytest.approx(want, rel=1e-14)
    # bias once, not once per rank: equals the single-GEMM reference on the concatenated K
    full = int8_scaled_mm_ref(torch.cat(x1, 1), torch.cat(x2, 0), s1, s2)
    full = full + bias.double() * s1.double()[:, None] * s2.double()[None, :]
    torch.testing.assert_close(torch.cat(outs, 0), full, rtol=1e-13, atol=1e-9)
    with pytest.raises(ValueError, match="M = 4 must be a multiple of world = 3"):
        quantized_matmul_reduce_scatter_ref(x1 + x1[:1], x2 + x2[:1], s1, s2, bias, 3)
    with pytest.raises(ValueError, match=r"one tensor per rank \(world = 2\); got 1 and 2"):
        quantized_matmul_reduce_scatter_ref(x1[:1], x2, s1, s2, bias, world)
