"""``fp8_blockwise_scaled_mm``: FP8 GEMM with blockwise / groupwise scale factors (seed 001, DeepSeek-V3 style).

    out[..., i, j] = cast( sum_kb a_scale[..., i // gM, kb] * b_scale[..., j // gN, kb]
                                  * sum_{k in [kb*gK, (kb+1)*gK)} a[..., i, k] * b[..., j, k]  (+ bias[j]) )

Layouts (L = optional batch, shared by every tensor of a call):
  a        float8_e4m3fn or float8_e5m2 [(L,) M, K], K contiguous (row stride a multiple of 16 elements).
  b        float8_e4m3fn or float8_e5m2 [(L,) N, K], K contiguous (the row-major weight, the seed's B).
           Any pairing of the two formats (e.g. e5m2 gradients x e4m3 weights): SM90's FP8 WGMMA takes each operand
           in either, so each pairing is its own compiled variant of the same kernel.
  a_scale  float32 [(L,) ceil(M/gM), K/gK];  b_scale float32 [(L,) ceil(N/gN), K/gK].
           Any element strides are accepted: the kernel reads the scales element by element. The fast, documented
           layout is the seed's MN-major one (stride 1 along M resp. N: ``s.t().contiguous().t()``, the DeepSeek-V3 /
           vLLM convention for the activation scale); the plain row-major (K-major) tensor works too. Fastest for
           per-token scales: MN-major with the column stride a multiple of 4 rows (``formats.to_tma_aligned_mn_major``),
           which the producer stages with TMA at any M (``sfa_tma_eligible``) and the dispatch prices accordingly.
  out      [(L,) M, N] row-major float16 / bfloat16.
  bias     optional [N] in out's dtype, shared by the batch: added in fp32 before the one rounding (an epilogue
           tree node), so a linear layer needs no second kernel for it.
Granularity (gM, gN, gK): gK = gN = 128, gM in {1, 128}: (1, 128, 128) "groupwise" (per-token x 128 activations,
128 x 128 weight blocks) and (128, 128, 128) "blockwise". K must be a multiple of gK; N a multiple of 8 (16-byte
output rows for the TMA store); M and N may be ragged (tiles clip).

Host path: as ``int8_scaled_mm``, a call signature validated once goes straight to the compiled TVM-FFI function
(which re-checks dtypes, extents, unit strides, divisibility and alignment in C++); any failure falls back to the
full Python checks, which name the argument at fault.
"""

from dataclasses import replace
from typing import Optional

import torch

from .. import arch as _arch
from .. import checks
from ..autograd import bias_grad, needs_grad, record, refuse_out
from ..configs import (SWAP_TILE_M, TileConfig, best_split, raster_for, size_swapped_tile, split_cost,
                       wave_cost, weight_preload_ktiles)
from ..formats.scale_layouts import normalize_granularity
from ..jit_cache import cached_compile
from ..plan_cache import PlanCache
from .split_k import launch_planned, resolve_launch

_OUT_DTYPES = (torch.float16, torch.bfloat16)
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
SUPPORTED_GRANULARITIES = ((1, 128, 128), (128, 128, 128))
_validated = PlanCache()
# K-tiles of each CTA's first tile prefetched into L2 before the PDL wait (Sm90GemmKernel.l2_warmup); 0 = off.
L2_WARMUP_KTILES = 2
# K-tiles of each CTA's first tile whose weight (b) is loaded into the shared-memory ring before the PDL wait
# (Sm90GemmKernel.weight_preload): None = ``configs.weight_preload_ktiles`` by token count; an int forces it.
WEIGHT_PRELOAD_KTILES = None
USE_SFA_TMA = True  # stage per-token a_scale with TMA where the tensor allows (sfa_tma_eligible)

# (max_m, config), first match wins; ``select_config`` then picks the tile size. Decode-size M (<= 64 tokens) swaps
# A and B, as the int8 kernel does: the weight's N fills WGMMA's M (64 or 128 rows per tile, ``SWAP_TILE_M``) and the
# tokens become the tile's N (16, 32 or 64 columns), so a 1-token problem no longer runs 64-row WGMMAs, and the
# per-token a_scale becomes a per-column scale of the kernel's promotion (its 128-row weight blocks one scale per
# tile). Measured on the H200 (session 6, docs/fp8_blockwise.md). Small M has few output tiles (N=2112: 17 weight
# tiles of 128 rows for 132 SMs), so those rows may split K (in-kernel, fp32 partials reduced in a fixed order; the
# wave model of ``configs.best_split`` picks the slice count per problem, up to ``split_k``).
# Most K slices of the last, partial wave's tiles above 256 tokens (``TileConfig.split_tail``; 1 = whole tiles only).
SPLIT_TAIL = 4
SM90_FP8_BLOCKWISE_TABLE: tuple[tuple[int, TileConfig], ...] = (
    (16, TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)),
    (32, TileConfig(tile_m=64, tile_n=32, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)),
    # 33-48 tokens: a 64-token tile ran 1.13x the time of M = 64 at M = 33 (7168 x 2048, session 22, H200): its
    # token box ran 31 rows past the last token (see configs.SM90_INT8_TABLE).
    (48, TileConfig(tile_m=64, tile_n=48, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)),
    (64, TileConfig(tile_m=64, tile_n=64, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)),
    (256, TileConfig(tile_m=128, tile_n=128, cluster_m=1, cluster_n=1, split_k=4)),
    (1 << 62, TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1, split_tail=SPLIT_TAIL)),
)
USE_SWAP_AB = True  # False: the unswapped 64-row tile for every M <= 64 (the session-5 dispatch)
# Where the swapped row runs: (max tokens, max K or None), first match - and only where the wave model finds the
# swapped problem strictly cheaper than the unswapped 64-row tile (ties go to the unswapped one: N = 24576 fills the
# GPU with 128 tiles of 64x192 and was 1-20% slower swapped at M >= 16). The swapped tile is narrow in N (the tokens)
# where the unswapped one is 128-192 wide, so each weight byte costs it more K-tiles, each with its fixed cost
# (barrier, WGMMA drain, one scale load and product per token column): the longer K and the more tokens, the more
# that outweighs the better-filled GPU. Measured on the H200 (session 6, benchmarks/experiments/fp8_swap.py,
# graph / do_bench us): N = 7168, K = 16384: M = 1 39.1 / 45.6 unswapped vs 35.8 / 46.1 swapped, M = 16
# 39.4 / 45.2 vs 39.5 / 50.4, M = 64 36.8 / 45.1 vs 48.5 / 57.3; N = 4096, K = 7168: M = 16 15.3 / 21.1 vs
# 12.2 / 19.5, M = 64 14.8 / 20.5 vs 15.5 / 23.4; N = 7168, K = 2048, M = 64: 10.5 / 15.1 vs 7.9 / 13.3.
SWAP_LIMITS = ((8, None), (32, 8192), (64, 4096))
_UNSWAPPED_SMALL_M = TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1, split_k=8)
# 65-128 tokens on a narrow layer (at most half as many 128-column weight tiles as SMs) with K <= 8192: two 64-row
# token tiles (one warpgroup each, k_pair, split up to 8) instead of one 128-row tile - twice the CTAs where the
# weight tiles alone leave SMs idle. Measured on the H200 (session 6, benchmarks/experiments/fp8_mid_m.py, graph us,
# 128-row vs 64-row): M = 128: N = 7168, K = 2048 13.4 vs 8.1; N = 2112 15.6 vs 13.1; N = 4096 18.2 vs 16.4; but
# N = 24576 (192 tiles) 15.0 vs 17.0 and N = 7168, K = 16384 at M = 96 42.7 vs 51.7; at M = 192 two or three
# 64-row token tiles lost on three of five layers.
MID_M_64_ROWS = (128, 8192)  # (max tokens, max K)
# Longer K on those narrow layers: the 64-row tiles where a_scale is staged by TMA (``sfa_tma_eligible``) and their
# work tiles (token tiles x weight tiles x K slices) fill one persistent wave at least as fully as the 128-row tile's
# do. Measured on an H100 (session 24, benchmarks/experiments/fp8_one_tile_pad.py, CUDA-graph medians, a_scale with a
# 4-row-aligned stride, M = 65-128): 128-row -> 64-row 0.93x on 7168 x 16384 (112 -> 112 work tiles), 0.91x on 4096 x
# 14336 and 4096 x 8448 (128 -> 128), 0.95x on 7168 x 18432, 0.88-0.90x on 2048 x 16384 (64 -> 128), 0.99-1.02x on
# 8192 x 28672 (128 -> 128); 1.07-1.09x on 5120 x 13824, whose 64-row problem takes two waves (240 work tiles), so
# it stays on 128 rows. With a_scale loaded by the consumers (a stride that is not a multiple of 4 rows) the 64-row
# tile lost 4-8% on 8192 x 28672 and 7168 x 18432, so it is not taken there. Session 6 (H200, older code) had found
# the opposite at 7168 x 16384, M = 96 (42.7 vs 51.7 us); not re-measured on an H200.
MID_M_64_ROWS_LONG_K = True
# Those two 64-row token tiles run as one 2x1 cluster: each weight tile (the kernel's B) is read from L2 once and
# multicast to both CTAs instead of once per token tile. Measured on an H100 (session 30, wave_fit.py
# WF_FP8_MID_CLUSTER, in the data archive's session44/moved/; CUDA-graph medians of 3 interleaved rounds,
# float64-checked): M = 96 / 128 on
# 7168 x 16384 0.95 / 0.97x the time, 4096 x 7168 0.95 / 0.94x, 7168 x 2048 0.96 / 0.95x, 2112 x 7168 0.96 / 0.96x.
# (The int8 analogue - a 2-CTA cluster along the swapped weight tiles multicasting the tokens - gained nothing:
# 1.00-1.02x.) At <= 64 tokens there is one token tile, so the row stays 1x1 there.
MID_M_CLUSTER = True

# Tile widths the host chooses among, with their measured cost per output column relative to 128 (H200,
# 2026-11-22, benchmarks/experiments/fp8_tile_n.py: 21 shapes, each width's time / its wave count). tile_n is at
# most 192: the kernel holds a second (temporary) fp32 accumulator for the two-level accumulation, and acc + tmp of
# 64x256 per warpgroup would take every register. What the width buys is wave quantization: N = 24576 at M = 64 is
# 192 tiles of 128 columns (two waves on 132 SMs) but 128 tiles of 192 (one wave, 23.7 -> 14.4 us); M = 1024,
# N = 2112 is 136 tiles of 128 but 112 of 160 (49.2 -> 33.7 us). At equal wave counts 160 is ~8% slower per column.
TILE_N_COST = {128: 1.0, 160: 1.08, 192: 1.0, 64: 1.05}
# The large-M row (128 rows, 2x1 cluster) when a_scale is staged by TMA, which the 160/192-wide tiles do and the
# 128-wide one does not (it would cost an A/B stage): the wide tiles are then cheaper per column. Fitted on an H100
# (session 24, fp8_large_m_widths.py, data archive session43/moved/: M = 1024 / 2048 / 4096 on seven layers, every width
# forced, CUDA-graph medians) as the costs whose wave-model pick comes closest to the fastest width: mean 0.4% and at
# most 2.4% slower than the best of the three, where TILE_N_COST's picks were 6.2% / 16.6% slower (7168 x 16384 at
# M = 1024: 244 -> 209 µs; 7168 x 2048 at M = 4096: 123 -> 109; 24576 x 1536 at M = 4096: 344 -> 310). With a_scale
# loaded by the consumers (M not a multiple of 4 in the plain MN-major layout) the wide tiles lose that advantage
# (7168 x 16384 at M = 4093: 885 / 937 / 1049 µs at 128 / 160 / 192), and TILE_N_COST's picks were within 1.5% on
# average there, so they keep it.
LARGE_M_STAGED_TILE_N_COST = {128: 1.0, 160: 0.92, 192: 0.89}
# 64 is offered to the 129-256-token problems of the 128x128 split-K row only: there it halves the tiles' width where 128-wide
# tiles leave SMs idle. Measured on an H100 (session 23, wave_fit.py WF_FP8_MID in the data archive's
# session44/moved/, CUDA-graph
# medians, µs 128 -> 64 wide): M = 192 / 256, 2112 x 7168 17.43 / 17.61 -> 15.79 / 15.99; 4096 x 7168 24.86 / 24.99 ->
# 23.91 / 23.53; the model keeps 128 on the 7168-row layers, where 64 was 1.2-1.4x slower. Offered to every row, the
# model's ties would move the swapped decode tiles and the large-M rows too (not measured there).
# Session 24 (H100, fp8_large_m_widths.py LW_SPLIT=4, M = 160 / 256 on 15 layers, 64 / 128 / 160 / 192 forced): priced
# at 1.0 the 64-wide tile was also taken on the Llama-size layers it had not been measured on, and lost there - 14336 x
# 4096 64.2 vs 36.7 µs (1.75x), 13824 x 5120 74.9 vs 44.1, 4096 x 14336 44.3 vs 38.4, 4096 x 11008 35.0 vs 32.6 -
# while it won on narrow layers with K <= 8192 (4096 x 4096 14.7 vs 16.4, 576 x 7168 11.0 vs 13.8, 2112 / 1536 /
# 4096 x 7168 4-13%). With long K the split-K that the 128-wide tile needs costs less than the wave model's per-K
# slice price and the narrow tile's own overhead wins. So: offered only for K <= ``SPLIT_ROW_EXTRA_WIDTHS_MAX_K``, at
# 1.05 per column (ties in waves go to 128); that takes the faster of 64 / 128 on 29 of the 30 measured problems
# (28672 x 8192 at M = 256: 64-wide 169.9 vs 166.2 µs).
SPLIT_ROW_EXTRA_WIDTHS = (64,)
SPLIT_ROW_EXTRA_WIDTHS_MAX_K = 8192


def _row_widths(row: TileConfig, m: int | None = None, k: int | None = None) -> list[int]:
    """Tile widths an unswapped row may take: ``TILE_N_COST``'s, plus ``SPLIT_ROW_EXTRA_WIDTHS`` for the 128-row
    split-K row at more than ``MID_M_64_ROWS[0]`` tokens and K <= ``SPLIT_ROW_EXTRA_WIDTHS_MAX_K`` (``m`` / ``k``
    None: any it may see, for ``shipped_configs``)."""
    split_row = (row.tile_m == 128 and row.split_k > 1 and (m is None or m > MID_M_64_ROWS[0])
                 and (k is None or k <= SPLIT_ROW_EXTRA_WIDTHS_MAX_K))
    return [w for w in TILE_N_COST if w not in SPLIT_ROW_EXTRA_WIDTHS or split_row]


def _wave_cost(cfg: TileConfig, m: int, n: int, k: int, batch: int, sm_count: int,
               width_cost: dict = TILE_N_COST) -> float:
    """``configs.split_cost`` of a config (K slices from ``best_split``) in weight rows x K-tiles, so that swapped and
    unswapped tiles compare; the unswapped tile width's measured cost factor (``width_cost``) included."""
    k_tiles = -(-k // 128)
    if cfg.swap_ab:
        tiles, rows = -(-n // cfg.tile_m) * -(-m // cfg.tile_n) * batch, cfg.tile_m
    else:
        tiles, rows = -(-m // cfg.tile_m) * -(-n // cfg.tile_n) * batch, cfg.tile_n
    slots = cfg.slots(sm_count)
    if cfg.split_tail > 1 and not cfg.swap_ab:  # whole clusters of tiles, the last wave split (configs.tail_split)
        return wave_cost(cfg, m, n, k, batch, sm_count) * rows * k_tiles * width_cost[cfg.tile_n]
    slices = best_split(tiles, rows, cfg.split_k, k_tiles, slots)
    return split_cost(tiles, slices, rows, slots) * k_tiles * (1.0 if cfg.swap_ab else width_cost[cfg.tile_n])


def _swap_allowed(m: int, k: int) -> bool:
    if not USE_SWAP_AB:
        return False
    max_k = next((mk for max_m, mk in SWAP_LIMITS if m <= max_m), 0)
    return max_k is None or k <= max_k


def _work_tiles(cfg: TileConfig, m: int, n: int, k: int, batch: int, sm_count: int) -> int:
    """Work tiles of an unswapped config's problem: output tiles x the K slices ``best_split`` plans."""
    tiles = -(-m // cfg.tile_m) * -(-n // cfg.tile_n) * batch
    return tiles * best_split(tiles, cfg.tile_m, cfg.split_k, -(-k // 128), cfg.slots(sm_count))


def _mid_m_rows() -> TileConfig:
    """The 64-row tile of 65-128 tokens (``MID_M_64_ROWS``): its two token tiles in a 2x1 cluster (``MID_M_CLUSTER``)."""
    return replace(_UNSWAPPED_SMALL_M, cluster_m=2) if MID_M_CLUSTER else _UNSWAPPED_SMALL_M


def select_config(m: int, n: int, k: int, batch: int = 1, sm_count: int = 132,
                  a_scale_staged: bool = True) -> TileConfig:
    """The table's row for M, at the tile size that the wave model (``configs.split_cost``: persistent waves x work
    per tile, K slices included) finds cheapest for this problem: the tile width of an unswapped row
    (``TILE_N_COST``, ties keep 128); for a swapped row the weight-tile height (``SWAP_TILE_M``, ties to the taller),
    and the swapped row only within ``SWAP_LIMITS`` and where it beats the unswapped 64-row tile; 65-128 tokens on
    narrow layers run 64-row tiles (``MID_M_64_ROWS``; above its K only with ``a_scale_staged`` - the call's a_scale
    is ``sfa_tma_eligible`` - and where the 64-row problem fills one wave at least as well, see
    ``MID_M_64_ROWS_LONG_K``). The large-M row prices its widths with ``LARGE_M_STAGED_TILE_N_COST`` when a_scale is
    staged."""
    base = next(cfg for max_m, cfg in SM90_FP8_BLOCKWISE_TABLE if m <= max_m)
    narrow_mid_m = (not base.swap_ab and m <= MID_M_64_ROWS[0] and -(-n // 128) * batch <= sm_count // 2)
    if narrow_mid_m and k <= MID_M_64_ROWS[1]:
        return _mid_m_rows()
    unswapped = base if not base.swap_ab else _UNSWAPPED_SMALL_M
    widths = [replace(unswapped, tile_n=w) for w in _row_widths(unswapped, m, k)]
    large_m_staged = a_scale_staged and base is SM90_FP8_BLOCKWISE_TABLE[-1][1]
    width_cost = LARGE_M_STAGED_TILE_N_COST if large_m_staged else TILE_N_COST
    costs = [_wave_cost(c, m, n, k, batch, sm_count, width_cost) for c in widths]
    cost = min(costs)
    unswapped = widths[costs.index(cost)]  # ties keep the earlier width (128 first)
    if narrow_mid_m and MID_M_64_ROWS_LONG_K and a_scale_staged:
        rows64 = _work_tiles(_UNSWAPPED_SMALL_M, m, n, k, batch, sm_count)
        if _work_tiles(unswapped, m, n, k, batch, sm_count) <= rows64 <= _UNSWAPPED_SMALL_M.slots(sm_count):
            return _mid_m_rows()
    if base.swap_ab and _swap_allowed(m, k):
        swapped = size_swapped_tile(base, m, n, k, batch, sm_count)
        if _wave_cost(swapped, m, n, k, batch, sm_count) < cost:
            return swapped
    return unswapped


def shipped_configs() -> list[TileConfig]:
    """Every config ``select_config`` can return (the table's rows at each tile size), each split row followed by
    its unsplit sibling (run when one K slice is planned)."""
    rows = [cfg for _, cfg in SM90_FP8_BLOCKWISE_TABLE] + [_UNSWAPPED_SMALL_M]
    sized = [c for cfg in rows for c in ([replace(cfg, tile_m=h) for h in SWAP_TILE_M] if cfg.swap_ab
                                         else [replace(cfg, tile_n=w) for w in _row_widths(cfg)])]
    sized.append(_mid_m_rows())  # one width: the mid-M rule does not size it
    return list(dict.fromkeys(c for cfg in sized for c in (cfg, replace(cfg, split_k=1, split_tail=1))))


def check_granularity(scale_granularity) -> tuple[int, int, int]:
    g = normalize_granularity(scale_granularity)
    if g not in SUPPORTED_GRANULARITIES:
        raise ValueError(f"scale_granularity must be one of {SUPPORTED_GRANULARITIES} ((gM, gN, gK): 'groupwise' "
                         f"per-token activations or 'blockwise' 128x128); got {tuple(g)}")
    return g


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _validate(a, b, a_scale, b_scale, out_dtype, gran, out):
    g_m, g_n, g_k = gran
    checks.check_dtype("a", a, _FP8_DTYPES)
    checks.check_dtype("b", b, _FP8_DTYPES)
    checks.check_gemm_pair(a, b)
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be torch.float16 or torch.bfloat16; got {out_dtype}")
    m, k = a.shape[-2:]
    n, k_b = b.shape[-2:]
    if k_b != k:
        raise ValueError(f"a is [.., M={m}, K={k}] but b is [.., N={n}, K={k_b}]: both must have K as the last dim")
    if k < g_k or k % g_k:
        raise ValueError(f"K = {k} must be a positive multiple of the K scale granularity gK = {g_k}")
    if n % 8:
        raise ValueError(f"N = {n} must be a multiple of 8 (16-byte rows of the fp16/bf16 output)")
    checks.check_inner_contiguous("a", a)
    checks.check_inner_contiguous("b", b)
    batch = tuple(a.shape[:-2])
    for name, t, rows, g, what in (("a_scale", a_scale, m, g_m, "M"), ("b_scale", b_scale, n, g_n, "N")):
        checks.check_dtype(name, t, (torch.float32,))
        want = (*batch, _ceil_div(rows, g), k // g_k)
        checks.check_shape(name, t, want, f"[(L,) ceil({what}/{g}), K/{g_k}] for granularity {tuple(gran)}")
        if any(s < 0 for s in t.stride()):
            raise ValueError(f"{name} must have non-negative strides; got {tuple(t.stride())}")
    device = checks.check_cuda({"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale, "out": out})
    checks.check_aligned("a", a)
    checks.check_aligned("b", b)
    for name, t in (("a_scale", a_scale), ("b_scale", b_scale)):
        if t.data_ptr() % 4:
            raise ValueError(f"{name} must be aligned to 4 bytes")
    out_shape = (*batch, m, n)
    if out is not None:
        checks.check_dtype("out", out, (out_dtype,))
        checks.check_shape("out", out, out_shape, "[(L,) M, N]")
        checks.check_inner_contiguous("out", out)
        checks.check_aligned("out", out)
    return device, m, n, k, out_shape


def sfa_tma_eligible(a_scale: torch.Tensor, gran: tuple[int, int, int]) -> bool:
    """Whether the producer can stage a_scale columns with TMA: per-token scales (gM = 1) in the MN-major layout
    with 16-byte strides and base (the DeepSeek-V3 / vLLM ``s.t().contiguous().t()`` layout when M % 4 == 0)."""
    if gran[0] != 1 or a_scale.stride(-2) != 1 or a_scale.data_ptr() % 16:
        return False
    return all(st % 4 == 0 for i, st in enumerate(a_scale.stride()) if i != a_scale.dim() - 2)


def sm90_target(device, op: str, a_scale: torch.Tensor, gran) -> tuple[int, bool]:
    """(SM count, whether a_scale is staged by TMA) for an FP8 blockwise launch on ``device``; a device that is not
    SM90 is refused with ``op``'s name (these kernels are SM90 only)."""
    dev_arch = _arch.current_arch(device)
    if dev_arch != "sm_90a":
        raise _arch.unsupported(dev_arch, f"{op} (SM90 only)")
    return _arch.sm_count(device.index), USE_SFA_TMA and sfa_tma_eligible(a_scale, gran)


def build_sm90(rank: int, out_dtype: torch.dtype, gran: tuple[int, int, int], config: TileConfig, sm_count: int,
               extra_options: str = "", sfa_tma: bool = False, a_dtype: torch.dtype = torch.float8_e4m3fn,
               b_dtype: torch.dtype = torch.float8_e4m3fn, raster: tuple[int, bool] = (1, True),
               weight_preload: int = 0, split_cluster: int = 1, has_bias: bool = False, masked: bool = False,
               rowwise_scales: bool = False, row_groups: bool = False):
    """Compile (uncached) the kernel for one variant from fake tensors; ``extra_options`` e.g. keeps the cubin.
    Call signature: ``fn(a, b, out, a_scale, b_scale, bias)`` (bias None unless ``has_bias``), then the split
    variants' workspace, semaphores, slice count and head; ``masked`` (batched, unsplit, 1x1 cluster): ``fn(a, b,
    out, a_scale, b_scale, bias, masked_m)``, masked_m int32 [L] (``fp8_blockwise_grouped_mm``). ``rowwise_scales``
    (``fp8_scaled_mm(use_fast_accum=False)``, ``promoted_rowwise_mm``): the epilogue also multiplies by a per-token
    and a per-channel float32 vector, the last two arguments of either signature (after the split ones).
    ``sfa_tma``: a_scale staged by TMA (the compiled function then accepts only tensors ``sfa_tma_eligible``).
    ``split_cluster``: K slices reduced within a cluster (``Sm90GemmKernel.split_cluster``; an unsplit config).
    ``row_groups`` (unswapped, unsplit, clusters along N only; ``fp8_blockwise_grouped_mm_contiguous``): a [M, K],
    b [G, N, K], out [M, N], a_scale 2-d, b_scale 3-d, and ``fn(a, b, out, a_scale, b_scale, bias, m_indices)``
    with m_indices int32 [M] (``Sm90GemmKernel.row_groups``; the epilogue checks each row, ``RowGroupGuard``)."""
    import cutlass
    import cutlass.cute as cute

    from ..compile_utils import fake_stream, fake_tensor, fake_vector, kernel_view
    from ..epilogues import Accumulator, ColVector, Compute, EpilogueTree, RowGroupGuard, RowVector
    from ..sm90.fp8_blockwise import Fp8BlockwiseGemmSm90

    d_cute = cutlass.BFloat16 if out_dtype == torch.bfloat16 else cutlass.Float16
    m, n, k = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=128)
    m_blocks, n_blocks, k_blocks = cute.sym_int32(), cute.sym_int32(), cute.sym_int32()
    batch = (cute.sym_int32(),) if rank == 3 else ()
    if row_groups and (rank != 2 or config.swap_ab or config.splits or masked):
        raise ValueError("row groups: a 2-d problem on an unswapped, unsplit config, not masked")
    b_batch = (cute.sym_int32(),) if row_groups else batch  # the experts' weights
    fp8 = {torch.float8_e4m3fn: cutlass.Float8E4M3FN, torch.float8_e5m2: cutlass.Float8E5M2}
    fa = fake_tensor(fp8[a_dtype], (*batch, m, k), stride_div=16)
    fb = fake_tensor(fp8[b_dtype], (*b_batch, n, k), stride_div=16)
    fd = fake_tensor(d_cute, (*batch, m, n), stride_div=8)
    # Scales: every stride symbolic, so one compiled kernel reads MN-major and K-major scale tensors alike - except
    # a TMA-staged a_scale, which must be MN-major with 16-byte strides (sfa_tma_eligible).
    if sfa_tma:
        f_sa = fake_tensor(cutlass.Float32, (*batch, m_blocks, k_blocks), contiguous_dim=-2, stride_div=4, align=16)
    else:
        f_sa = fake_tensor(cutlass.Float32, (*batch, m_blocks, k_blocks), contiguous_dim=None, align=4)
    f_sb = fake_tensor(cutlass.Float32, (*b_batch, n_blocks, k_blocks), contiguous_dim=None, align=4)
    f_bias = fake_vector(d_cute, n, align=2) if has_bias else None
    swap = config.swap_ab
    if masked and (rank != 3 or config.splits):
        raise ValueError("masked batches: a batched ([L, M, K]) problem on an unsplit config")
    if swap and sfa_tma:
        raise ValueError("sfa_tma stages the activations' per-token scales of an unswapped tile only")
    # The mainloop already applied the scales; the epilogue converts the fp32 accumulator and adds the bias (a
    # vector along the output's columns: the kernel's rows when swapped). Swapped, the kernel computes D^T = B A^T:
    # its rows are the weight's N (gN-row scale blocks), its columns the tokens (gM).
    g_m, g_n, g_k = gran
    root = Accumulator()
    if rowwise_scales:  # per-token x per-channel scales after the promoted sum (tokens: the kernel's N when swapped)
        token, channel = (RowVector, ColVector) if swap else (ColVector, RowVector)
        root = Compute("mul", Compute("mul", root, token("token_scale")), channel("channel_scale"))
    if has_bias:
        root = Compute("add", root, (ColVector if swap else RowVector)("bias"))
    if row_groups:
        root = RowGroupGuard(root, "m_indices")
    kernel = Fp8BlockwiseGemmSm90(config, EpilogueTree(root), (g_n, g_m, g_k) if swap else gran,
                                  sm_count=sm_count, sfa_tma=sfa_tma, l2_warmup=L2_WARMUP_KTILES, raster=raster,
                                  weight_preload=weight_preload, weight_operand=0 if swap else 1,
                                  split_cluster=split_cluster, masked_dim=(1 if swap else 0) if masked else None,
                                  row_groups=row_groups)

    options = f"--enable-tvm-ffi --gpu-arch sm_90a {extra_options}".strip()

    def views(a, b, d, a_scale, b_scale, bias, token_scale=None, channel_scale=None, m_indices=None):
        """The kernel's operands: A, B, D and (epilogue operands, then the mainloop's scales)."""
        mA, mB, sA, sB = (kernel_view(t, 0, 1) for t in (a, b, a_scale, b_scale))
        named = {"bias": bias, "token_scale": token_scale, "channel_scale": channel_scale, "m_indices": m_indices}
        epi = tuple(named[name] for name in kernel.epilogue.operand_names)
        if swap:
            return mB, mA, kernel_view(d, 1, 0), (*epi, sB, sA)
        return mA, mB, kernel_view(d, 0, 1), (*epi, sA, sB)

    if masked:
        @cute.jit
        def launch_masked(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor,
                          b_scale: cute.Tensor, bias, masked_m: cute.Tensor, stream):
            mA, mB, mD, operands = views(a, b, d, a_scale, b_scale, bias)
            kernel(mA, mB, mD, (*operands, masked_m), stream)

        f_masked = fake_vector(cutlass.Int32, batch[0])
        return cute.compile(launch_masked, fa, fb, fd, f_sa, f_sb, f_bias, f_masked, fake_stream(), options=options)

    if row_groups:
        @cute.jit
        def launch_row_groups(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor,
                              b_scale: cute.Tensor, bias, m_indices: cute.Tensor, stream):
            kernel(*views(a, b, d, a_scale, b_scale, bias, m_indices=m_indices), stream)

        return cute.compile(launch_row_groups, fa, fb, fd, f_sa, f_sb, f_bias, fake_vector(cutlass.Int32, m),
                            fake_stream(), options=options)

    f_ws = fake_vector(cutlass.Float32, cute.sym_int32(), align=16)
    f_sem = fake_vector(cutlass.Int32, cute.sym_int32())
    if rowwise_scales:
        f_vectors = (fake_vector(cutlass.Float32, m), fake_vector(cutlass.Float32, n))
        if not config.splits:
            @cute.jit
            def launch_rowwise(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor,
                               b_scale: cute.Tensor, bias, stream, token_scale: cute.Tensor,
                               channel_scale: cute.Tensor):
                kernel(*views(a, b, d, a_scale, b_scale, bias, token_scale, channel_scale), stream)

            return cute.compile(launch_rowwise, fa, fb, fd, f_sa, f_sb, f_bias, fake_stream(), *f_vectors,
                                options=options)

        @cute.jit
        def launch_split_rowwise(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor,
                                 b_scale: cute.Tensor, bias, workspace: cute.Tensor, semaphore: cute.Tensor,
                                 num_splits: cutlass.Int32, head: cutlass.Int32, stream, token_scale: cute.Tensor,
                                 channel_scale: cute.Tensor):
            kernel(*views(a, b, d, a_scale, b_scale, bias, token_scale, channel_scale), stream,
                   (workspace, semaphore, num_splits, head))

        return cute.compile(launch_split_rowwise, fa, fb, fd, f_sa, f_sb, f_bias, f_ws, f_sem, cutlass.Int32(1),
                            cutlass.Int32(0), fake_stream(), *f_vectors, options=options)

    if not config.splits:
        @cute.jit
        def launch(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor, b_scale: cute.Tensor,
                   bias, stream):
            kernel(*views(a, b, d, a_scale, b_scale, bias), stream)

        return cute.compile(launch, fa, fb, fd, f_sa, f_sb, f_bias, fake_stream(), options=options)

    @cute.jit
    def launch_split(a: cute.Tensor, b: cute.Tensor, d: cute.Tensor, a_scale: cute.Tensor, b_scale: cute.Tensor,
                     bias, workspace: cute.Tensor, semaphore: cute.Tensor, num_splits: cutlass.Int32,
                     head: cutlass.Int32, stream):
        kernel(*views(a, b, d, a_scale, b_scale, bias), stream, (workspace, semaphore, num_splits, head))

    return cute.compile(launch_split, fa, fb, fd, f_sa, f_sb, f_bias, f_ws, f_sem, cutlass.Int32(1),
                        cutlass.Int32(0), fake_stream(), options=options)


def _compile_sm90(rank, out_dtype, gran, config: TileConfig, sm_count, sfa_tma: bool, a_dtype, b_dtype,
                  raster=(1, True), weight_preload=0, split_cluster=1, has_bias=False, masked=False,
                  rowwise_scales=False, row_groups=False):
    key = ("sm_90a", rank, str(a_dtype), str(b_dtype), str(out_dtype), gran, config.key, sm_count)
    key += ("bias",) if has_bias else ()
    key += ("masked",) if masked else ()
    key += ("row_groups",) if row_groups else ()
    key += ("rowwise_scales",) if rowwise_scales else ()
    key += ("sfa_tma",) if sfa_tma else ()
    key += ("l2_warmup", L2_WARMUP_KTILES) if L2_WARMUP_KTILES else ()
    key += ("weight_preload", weight_preload) if weight_preload else ()
    key += ("raster", raster) if raster != (1, True) else ()
    key += ("split_cluster", split_cluster) if split_cluster > 1 else ()
    return cached_compile("fp8_blockwise_scaled_mm", key,
                          lambda: build_sm90(rank, out_dtype, gran, config, sm_count, sfa_tma=sfa_tma,
                                             a_dtype=a_dtype, b_dtype=b_dtype, raster=raster,
                                             weight_preload=weight_preload, split_cluster=split_cluster,
                                             has_bias=has_bias, masked=masked, rowwise_scales=rowwise_scales,
                                             row_groups=row_groups))


def fp8_blockwise_scaled_mm(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                            out_dtype: torch.dtype = torch.bfloat16, scale_granularity=(1, 128, 128),
                            out: Optional[torch.Tensor] = None, config: Optional[TileConfig] = None,
                            bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """FP8 GEMM with per-block scales; see the module docstring for layouts and semantics.

    bias: optional [N] in ``out_dtype``, added in the epilogue (fp32, before the rounding); differentiable.
    scale_granularity: (gM, gN, gK), "groupwise" = (1, 128, 128) or "blockwise" = (128, 128, 128).
    config: a :class:`~cute_kernels.configs.TileConfig` to override the table (tile_n <= 192; with ``swap_ab`` the
      tile's rows are the weight's N and its columns the tokens, as in ``int8_scaled_mm``).
    Backward: d bias only; any other argument that requires grad gives an output whose backward raises
    (``autograd.py``).
    """
    if needs_grad(a, b, a_scale, b_scale, bias):
        refuse_out("fp8_blockwise_scaled_mm", out)
        return record("fp8_blockwise_scaled_mm",
                      lambda: fp8_blockwise_scaled_mm(a, b, a_scale, b_scale, out_dtype, scale_granularity,
                                                      config=config, bias=bias),
                      ("a", "b", "a_scale", "b_scale", "bias"), (a, b, a_scale, b_scale, bias), {"bias": bias_grad})
    sig = (a.shape, b.shape, a.dtype, b.dtype, a_scale.shape, b_scale.shape, out_dtype, scale_granularity, config,
           bias is not None)
    plan = _validated.get(sig)
    if plan is not None:
        fn, out_shape, split = plan
        if out is None:
            out = torch.empty(out_shape, dtype=out_dtype, device=a.device)
        try:
            launch_planned(fn, (a, b, out, a_scale, b_scale, bias), split, a.device, torch.float32)
            return out
        except Exception:  # noqa: BLE001 - fall through to the checks, which name the argument at fault
            pass
    gran = check_granularity(scale_granularity)
    a, b = checks.check_tensor("a", a), checks.check_tensor("b", b)
    a_scale, b_scale = checks.check_tensor("a_scale", a_scale), checks.check_tensor("b_scale", b_scale)
    device, m, n, k, out_shape = _validate(a, b, a_scale, b_scale, out_dtype, gran, out)
    if bias is not None:
        bias = checks.check_bias(bias, n, out_dtype, device)
    if m == 0 or n == 0 or (a.dim() == 3 and a.shape[0] == 0):  # e.g. an MoE expert that got no tokens
        return out if out is not None else torch.empty(out_shape, dtype=out_dtype, device=device)
    sms, staged = sm90_target(device, "fp8_blockwise_scaled_mm", a_scale, gran)
    batch = a.shape[0] if a.dim() == 3 else 1
    cfg = config if config is not None else select_config(m, n, k, batch, sms, a_scale_staged=staged)
    sfa_tma = staged and not cfg.swap_ab
    cfg, split, split_cluster = resolve_launch(cfg, m, n, k, batch, sms)
    preload = weight_preload_ktiles("fp8", m) if WEIGHT_PRELOAD_KTILES is None else WEIGHT_PRELOAD_KTILES
    fn = _compile_sm90(a.dim(), out_dtype, gran, cfg, sms, sfa_tma, a.dtype, b.dtype,
                       raster_for(cfg, m, n, k, batch, sms), preload, split_cluster, bias is not None)
    if out is None:
        out = torch.empty(out_shape, dtype=out_dtype, device=device)
    launch_planned(fn, (a, b, out, a_scale, b_scale, bias), split, device, torch.float32)
    _validated[sig] = (fn, out_shape, split)
    return out


# ------------------------------------------------------------------------------ promoted per-token / per-channel FP8
_unit_scales: dict = {}  # device index -> a 0-d float32 1.0, expanded (stride 0) into unit block scales
_promoted_plans = PlanCache()


def promoted_rowwise_mm(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                        bias: Optional[torch.Tensor], out_dtype: torch.dtype,
                        out: Optional[torch.Tensor]) -> torch.Tensor:
    """``fp8_scaled_mm(..., use_fast_accum=False)`` (arguments as there, already checked by its ``_validate``; b is
    the [(L,) K, N] column-major view): this op's kernel with 128 x 128 block scales of 1.0 (stride-0 views of one
    float, so the mainloop's promotion - each 128-deep WGMMA partial sum added into an fp32 accumulator - runs as
    for real block scales) and the per-token / per-channel scales multiplied in the epilogue. K a multiple of 128."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if k % 128:
        raise ValueError(f"K = {k} must be a multiple of 128 with use_fast_accum=False (the promotion interval)")
    if out is None:
        out = torch.empty((*a.shape[:-1], n), dtype=out_dtype, device=a.device)
    if m == 0 or n == 0 or (a.dim() == 3 and a.shape[0] == 0):
        return out
    sig = (a.shape, b.shape, a.dtype, b.dtype, a_scale.shape, b_scale.shape, None if bias is None else bias.dtype,
           out_dtype)
    plan = _promoted_plans.get(sig)
    if plan is None:
        device = a.device
        batch = a.shape[0] if a.dim() == 3 else 1
        sms = _arch.sm_count(device.index)
        # Priced as for a staged a_scale: what makes the wide large-M tiles slow with consumer-loaded per-token
        # scales (one load per row and K-tile) is absent from unit 128-row blocks (one per tile). Measured (H100,
        # session 38, one A/B): 4096 x 14336 x 4096 496 -> 423 µs (128x128 -> 128x160); where both pricings pick the
        # same tile the two ran within 5%.
        cfg = select_config(m, n, k, batch, sms, a_scale_staged=True)
        cfg, split, split_cluster = resolve_launch(cfg, m, n, k, batch, sms)
        preload = weight_preload_ktiles("fp8", m) if WEIGHT_PRELOAD_KTILES is None else WEIGHT_PRELOAD_KTILES
        fn = _compile_sm90(a.dim(), out_dtype, (128, 128, 128), cfg, sms, False, a.dtype, b.dtype,
                           raster_for(cfg, m, n, k, batch, sms), preload, split_cluster, bias is not None,
                           rowwise_scales=True)
        plan = (fn, split)
        _promoted_plans[sig] = plan
    fn, split = plan
    unit = _unit_scales.get(a.device.index)
    if unit is None:
        unit = _unit_scales[a.device.index] = torch.ones((), dtype=torch.float32, device=a.device)
    lead = a.shape[:-2]
    ua, ub = (unit.expand(*lead, -(-rows // 128), k // 128) for rows in (m, n))
    token = a_scale if a_scale.shape[0] == m else a_scale.expand(m).contiguous()  # a per-tensor scale as a vector
    channel = b_scale if b_scale.shape[0] == n else b_scale.expand(n).contiguous()
    launch_planned(fn, (a, b.transpose(-1, -2), out, ua, ub, bias), split, a.device, torch.float32,
                   trailing=(token, channel))
    return out
