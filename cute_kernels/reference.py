"""Float64 reference math for every op in the library.

These run on any device (CPU included) and are the ground truth of the tests: integer and fp8 inputs are exact in
float64, so the only error a kernel may show against them is its own accumulation order and the final rounding.
Each function returns float64; callers cast to the output dtype when they compare rounded results.
"""

from __future__ import annotations

import torch

from .formats.awq import awq_dequantize_float
from .formats.bitpack import group_size_of, unpack_weights
from .formats.scale_layouts import normalize_granularity


def int8_scaled_mm_ref(a, b, a_scale, b_scale, bias=None, azp_adj=None, azp=None):
    """out[..., i, j] = (sum_k a[..., i, k] * b[..., k, j]) * a_scale[i] * b_scale[j] + bias[j], in float64; an
    int32 bias is added to the accumulator before the scales instead: (acc + bias[j]) * a_scale[i] * b_scale[j].
    Zero points of asymmetric activations come off the accumulator first: acc - azp[i] * azp_adj[j] with a per-token
    ``azp``, acc - azp_adj[j] without one.

    a: int8 [M, K] or [L, M, K]; b: int8 [K, N] or [L, K, N]; a_scale: [M] or [1]; b_scale: [N] or [1]; bias: [N] or
    None; azp_adj: int32 [N] or None; azp: int32 [M] or None.
    """
    acc = torch.matmul(a.double(), b.double())  # exact: |sum| < 2^53 for any K this library accepts
    if azp_adj is not None:
        zp = azp.double().reshape(-1, 1) if azp is not None else 1.0
        acc = acc - zp * azp_adj.double().reshape(1, -1)
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias.double().reshape(1, -1)
    out = acc * a_scale.double().reshape(-1, 1) * b_scale.double().reshape(1, -1)
    if bias is not None and bias.dtype != torch.int32:
        out = out + bias.double().reshape(1, -1)
    return out


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _expand_rows(scale: torch.Tensor, g: int, rows: int) -> torch.Tensor:
    """[..., ceil(rows/g), KB] -> [..., rows, KB]: row i gets scale row i // g."""
    return scale.repeat_interleave(g, dim=-2)[..., :rows, :]


def fp8_blockwise_scaled_mm_ref(a, b, a_scale, b_scale, scale_granularity=(1, 128, 128), bias=None):
    """FP8 GEMM with blockwise/groupwise scales, in float64:
    out[..., i, j] = sum_kb a_scale[..., i//gM, kb] * b_scale[..., j//gN, kb]
                            * sum_{k in kb} a[..., i, k] * b[..., j, k]  (+ bias[j]).

    a: [M, K] or [L, M, K] (fp8, or any float dtype); b: [N, K] or [L, N, K] (the seed's B, K contiguous);
    a_scale: [(L,) ceil(M/gM), ceil(K/gK)]; b_scale: [(L,) ceil(N/gN), ceil(K/gK)], any strides (K- or MN-major).
    Returns float64 [(L,) M, N]. For e4m3 inputs each K-block's partial sum (gK <= 2048) is exact in float64 (every
    product is a multiple of 2^-18 below 2^18), so a kernel can differ only by its own accumulation and rounding.
    """
    gM, gN, gK = normalize_granularity(scale_granularity)
    if a.dim() not in (2, 3) or b.dim() != a.dim():
        raise ValueError(f"a and b must both be 2-D ([M, K], [N, K]) or both 3-D ([L, M, K], [L, N, K]); "
                         f"got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    M, K = a.shape[-2], a.shape[-1]
    N = b.shape[-2]
    if b.shape[-1] != K or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"b must have shape [(L,) N, K] with K = {K} and the batch of a; got {tuple(b.shape)}")
    KB = _ceil_div(K, gK)
    for name, s, rows, g in (("a_scale", a_scale, M, gM), ("b_scale", b_scale, N, gN)):
        want = (*a.shape[:-2], _ceil_div(rows, g), KB)
        if tuple(s.shape) != want:
            raise ValueError(f"{name} must have shape {want} ([(L,) ceil({rows}/{g}), ceil({K}/{gK})]); "
                             f"got {tuple(s.shape)}")
    a64, b64 = a.double(), b.double()
    sa = _expand_rows(a_scale.double(), gM, M)  # [..., M, KB]
    sb = _expand_rows(b_scale.double(), gN, N)  # [..., N, KB]
    out = torch.zeros((*a.shape[:-2], M, N), dtype=torch.float64, device=a.device)
    for kb in range(KB):  # a loop, not a [KB, M, N] tensor: the reference must fit in memory at real sizes
        ks = slice(kb * gK, min((kb + 1) * gK, K))
        partial = torch.matmul(a64[..., ks], b64[..., ks].transpose(-1, -2))
        out += partial * sa[..., kb].unsqueeze(-1) * sb[..., kb].unsqueeze(-2)
    return out if bias is None else out + bias.double()


def quantized_mm_ref(x, w_packed, scale, bits, group_scales=None):
    """out[..., m, n] = sum_k x[..., m, k] * decode(w)[n, k] * scale * group_scales[n, k // group], in float64.

    x: [..., M, K] float; w_packed: uint8 [N, K*bits/8] (formats.bitpack layout); scale: float or 1-element tensor;
    group_scales: float32 [N, K/group] or None. Returns float64 [..., M, N].
    """
    K = x.shape[-1]
    w = unpack_weights(w_packed, bits, K).double() * float(scale)
    if group_scales is not None:
        g = group_size_of(K, group_scales, w.shape[0])
        w = w * group_scales.double().to(w.device).repeat_interleave(g, dim=1)
    return torch.matmul(x.double(), w.t().to(x.device))


def awq_gemm_ref(x, qweight, scales, qzeros):
    """out[m, o] = sum_i x[m, i] * (q[i, o] - z[i // G, o]) * s[i // G, o], in float64 (formats.awq layout).

    x: [..., M, IC]; qweight int32 [IC, OC/8]; scales fp16/bf16 [IC/G, OC]; qzeros int32 [IC/G, OC/8].
    The dequantized weight is exact here; kernels that round it to fp16/bf16 first (vLLM's does) differ by that
    rounding.
    """
    w = awq_dequantize_float(qweight, scales, qzeros).double()  # exact: 5-bit int times an fp16/bf16 value
    if x.shape[-1] != w.shape[0]:
        raise ValueError(f"x must have IC = qweight.shape[0] = {w.shape[0]} columns; got shape {tuple(x.shape)}")
    return torch.matmul(x.double(), w.to(x.device))


def quantized_matmul_reduce_scatter_ref(x1_shards, x2_shards, scale_x1, scale_x2, bias, world):
    """Per-rank float64 outputs of the int8 matmul + reduce-scatter (seed 004).

    Rank r holds x1_shards[r] int8 [M, K_r] and x2_shards[r] int8 [K_r, N] (a K split, as in a row-parallel linear).
    Full result: (sum_r x1_shards[r] @ x2_shards[r] + bias) * scale_x1[:, None] * scale_x2[None, :], with bias
    (int32 [N]) counted once; scale_x1 float32 [M], scale_x2 float32 [N]. Rank r receives rows
    [r*M/world, (r+1)*M/world). Returns a list of `world` float64 tensors [M/world, N].
    """
    if len(x1_shards) != world or len(x2_shards) != world:
        raise ValueError(f"x1_shards and x2_shards must hold one tensor per rank (world = {world}); "
                         f"got {len(x1_shards)} and {len(x2_shards)}")
    M, N = x1_shards[0].shape[0], x2_shards[0].shape[-1]
    if M % world != 0:
        raise ValueError(f"M = {M} must be a multiple of world = {world} (each rank gets M / world rows)")
    acc = torch.zeros((M, N), dtype=torch.float64, device=x1_shards[0].device)
    for r, (x1, x2) in enumerate(zip(x1_shards, x2_shards)):
        if x1.shape[0] != M or x2.shape[-1] != N or x1.shape[1] != x2.shape[0]:
            raise ValueError(f"rank {r}: x1_shards[{r}] must be [M={M}, K_r] and x2_shards[{r}] [K_r, N={N}]; "
                             f"got {tuple(x1.shape)} and {tuple(x2.shape)}")
        acc += torch.matmul(x1.double(), x2.double().to(acc.device))  # exact: integers below 2^53
    if bias is not None:
        acc += bias.double().to(acc.device).reshape(1, N)
    out = acc * scale_x1.double().to(acc.device).reshape(M, 1) * scale_x2.double().to(acc.device).reshape(1, N)
    return list(out.split(M // world, dim=0))
