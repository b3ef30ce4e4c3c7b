"""Tile configurations and the shape-bucket dispatch tables, in one place.

A :class:`TileConfig` is everything about a kernel's tiling that is baked in at compile time. The tables below map a
problem (arch, M, N, K) to a config, following the seed's decision tree (``../shared/seeds/000_*``: the CUTLASS 3.x
SM90 int8 dispatch picks narrower tiles and swaps A/B as M shrinks) and adjusted by measurement (docs/int8_scaled_mm.md
records the runs behind each row). Callers may pass their own ``TileConfig`` to any op to override the table.

Swap-AB: for decode-size M the kernel computes D^T = B^T A^T, so the weight's N lands on WGMMA's M side (tiles of
64/128 rows) and the few tokens on WGMMA's N side (as narrow as 8). The output is then written through an
M-major view of D; the epilogue tree swaps which of a_scale/b_scale is the row broadcast.
"""

from __future__ import annotations

import os

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class TileConfig:
    """Compile-time tiling of a SM90 warp-specialized GEMM.

    tile_m, tile_n: the CTA tile in the kernel's (M, N) (after a swap, M is the weight's N).
    cluster_m, cluster_n: CTAs per cluster; A is multicast along cluster_n, B along cluster_m.
    swap_ab: compute the transposed problem (see module docstring).
    stages: shared-memory pipeline depth; 0 means "as many as fit".
    split_k: most K slices per output tile (1 = off). The host picks the actual count per call so that the
      work tiles about fill the GPU; the slices reduce in-kernel (the last one to finish adds the others' int32
      partials from a library-owned workspace and runs the epilogue).
    ctas_per_sm: persistent CTAs per SM (1-4). Above 1 they split the SM's shared memory and registers (fewer
      stages, fewer registers per consumer thread) and the persistent grid and the wave model count
      ``sm_count * ctas_per_sm`` slots (``slots``).
    split_tail: most K slices for the tiles of the last, partial wave of a problem with more tiles than slots (1 =
      off). The full waves run whole tiles; the host picks per call whether and how finely the rest is split
      (``tail_split``), so that a wave a third full takes about a third of a wave's time instead of a whole one.
    """

    tile_m: int = 128
    tile_n: int = 256
    cluster_m: int = 2
    cluster_n: int = 1
    swap_ab: bool = False
    stages: int = 0
    split_k: int = 1
    ctas_per_sm: int = 1
    split_tail: int = 1

    def __post_init__(self):
        if self.tile_m not in (64, 128):
            raise ValueError(f"TileConfig.tile_m must be 64 or 128 (WGMMA M per warpgroup is 64); got {self.tile_m}")
        # A multiple of 16, not 8: the epilogue's register -> smem copy (stmatrix x4) covers 16 columns per step, so
        # a tile 8 columns short of that stored wrong results (session 23: FP8 with tile_n = 56, relative error 1.4).
        if not (16 <= self.tile_n <= 256 and self.tile_n % 16 == 0):
            raise ValueError(f"TileConfig.tile_n must be a multiple of 16 in [16, 256] (the epilogue stores 16-column "
                             f"steps); got {self.tile_n}")
        for name in ("cluster_m", "cluster_n"):
            v = getattr(self, name)
            if v not in (1, 2, 4):
                raise ValueError(f"TileConfig.{name} must be 1, 2 or 4; got {v}")
        if self.cluster_m * self.cluster_n > 4:
            raise ValueError(f"TileConfig cluster size must be <= 4; got {self.cluster_m}x{self.cluster_n}")
        if self.split_k < 1:
            raise ValueError(f"TileConfig.split_k must be >= 1; got {self.split_k}")
        if self.split_tail < 1:
            raise ValueError(f"TileConfig.split_tail must be >= 1; got {self.split_tail}")
        if self.ctas_per_sm not in (1, 2, 3, 4):
            raise ValueError(f"TileConfig.ctas_per_sm must be 1, 2, 3 or 4; got {self.ctas_per_sm}")

    def slots(self, sm_count: int) -> int:
        """CTAs that run at once on ``sm_count`` SMs: what the persistent grid and the wave model count."""
        return sm_count * self.ctas_per_sm

    @property
    def splits(self) -> bool:
        """Whether the config's kernel is the split-K variant (it may split K, uniformly or the last wave)."""
        return self.split_k > 1 or self.split_tail > 1

    @property
    def key(self) -> tuple:
        return tuple(sorted(asdict(self).items()))

    def describe(self) -> str:
        s = f"{self.tile_m}x{self.tile_n} cluster {self.cluster_m}x{self.cluster_n}"
        if self.swap_ab:
            s += " swap_ab"
        if self.split_k > 1:
            s += f" split_k={self.split_k}"
        if self.split_tail > 1:
            s += f" split_tail={self.split_tail}"
        if self.stages:
            s += f" stages={self.stages}"
        if self.ctas_per_sm > 1:
            s += f" {self.ctas_per_sm} CTAs/SM"
        return s


# (max_m, config) rows, first match wins; M is the token count (rows of the user's A).
# Large M: 128x256 tiles, 2x1 cluster (B multicast), as in the seed's default SM90 config.
# Small M: swap A/B so that the weight fills WGMMA's M; tile_n covers the tokens; split K so that the few weight
# tiles (N/128 of them) still occupy every SM. The token tile is M rounded up to 16 above 32 tokens (WGMMA's int8 N
# steps by 16 there): a token box that runs far past the last token costs more than the rows it skips (session 22,
# H200, benchmarks/experiments/partial_token_tiles.py: M = 65 on the 128-token tile 1.17-1.51x the time of M = 128).
SM90_INT8_TABLE: tuple[tuple[int, TileConfig], ...] = (
    (16, TileConfig(tile_m=64, tile_n=16, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)),
    (32, TileConfig(tile_m=64, tile_n=32, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)),
    (48, TileConfig(tile_m=64, tile_n=48, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)),
    (64, TileConfig(tile_m=64, tile_n=64, cluster_m=1, cluster_n=1, swap_ab=True, split_k=8)),
    (80, TileConfig(tile_m=64, tile_n=80, cluster_m=1, cluster_n=1, swap_ab=True, split_k=4)),
    (96, TileConfig(tile_m=64, tile_n=96, cluster_m=1, cluster_n=1, swap_ab=True, split_k=4)),
    (112, TileConfig(tile_m=64, tile_n=112, cluster_m=1, cluster_n=1, swap_ab=True, split_k=4)),
    (128, TileConfig(tile_m=64, tile_n=128, cluster_m=1, cluster_n=1, swap_ab=True, split_k=4)),
    (512, TileConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=1, split_tail=4)),
    (1 << 62, TileConfig(tile_m=128, tile_n=256, cluster_m=1, cluster_n=2, split_tail=4)),
)


# Weight-tile heights tried for the swapped (decode-size) rows: 64 gives twice the tiles (more SMs busy on a narrow
# N), 128 halves the per-tile overhead. Measured on the H200 (docs/int8_scaled_mm.md): N=4096 prefers 64 rows with
# 2 K slices, N=14336 prefers 128 rows unsplit (112 tiles in one wave).
SWAP_TILE_M = (64, 128)
SPLIT_SLICE_COST = 0.1  # relative cost of each extra K slice (partial-sum round trip through L2), fitted on the H200


def split_cost(tiles: int, slices: int, tile_m: int, sm_count: int) -> float:
    """Modelled time of a weight-streaming GEMM: persistent waves x work per wave (tile_m rows of 1/slices of K)."""
    return -(-tiles * slices // sm_count) * tile_m / slices * (1 + SPLIT_SLICE_COST * (slices - 1))


def best_split(tiles: int, tile_m: int, max_slices: int, k_tiles: int, sm_count: int) -> int:
    return min(range(1, max(1, min(max_slices, k_tiles)) + 1), key=lambda s: split_cost(tiles, s, tile_m, sm_count))


# Cost of a split tail tile's partial sums, per stripe (written by its slice, read back by the tile's last one), in
# K-tiles of the same tile's mainloop. Its time is set by the stripe's bytes, not by K, so a split pays at long K and
# not at short K (session 9 split every tile of such problems: FP8 M = 1024, N = 7168, K = 2048 took 33.0 -> 67.6 µs
# with two slices, its 57 MB of stripes spilling out of L2). Fitted on an H100 (session 25,
# benchmarks/experiments/tail_split.py, 16 int8 problems with every slice count forced: the pick at 6 is within 1.5%
# of the fastest measured variant on all of them; 1.5, the bytes alone, took splits that lost up to 7%): it also
# carries what the model leaves out, e.g. that an unsplit partial wave runs faster than a full one.
TAIL_STRIPE_KTILES = 6.0


def tail_split(units: int, slots: int, max_slices: int, k_tiles: int) -> tuple[float, int, int]:
    """(waves, K slices, head) of a multi-wave problem of ``units`` work positions on ``slots`` that runs its full
    waves whole and splits the last, partial wave's positions into K slices (``TileConfig.split_tail``).

    waves = full waves + the split tail's rounds x (1 / slices + the partial sums' round trip): the tile's last slice
    waits for its own stripe and reads all ``slices`` of them, so ``slices + 1`` stripes of ``TAIL_STRIPE_KTILES``
    each per ``k_tiles``. head = the positions run whole (``units`` when splitting does not pay: one slice)."""
    full, tail = divmod(units, slots)
    best = (float(full + (tail > 0)), 1, units)
    if tail == 0 or full == 0:
        return best
    for s in range(2, max(1, min(max_slices, k_tiles)) + 1):
        waves = full + -(-tail * s // slots) * (1 / s + TAIL_STRIPE_KTILES * (s + 1) / k_tiles)
        if waves < best[0]:
            best = (waves, s, full * slots)
    return best


def size_swapped_tile(cfg: TileConfig, m: int, n: int, k: int, batch: int, sm_count: int) -> TileConfig:
    """A swapped (decode-size) row at the weight-tile height (``SWAP_TILE_M``) the wave model prefers for this
    problem; ties go to the taller tile (half the tiles, half the per-tile prologue/epilogue). Shared by the int8 and
    FP8 tables."""
    k_tiles = -(-k // 128)

    def cost(tile_m):
        tiles = -(-n // tile_m) * -(-m // cfg.tile_n) * batch
        slots = cfg.slots(sm_count)
        return split_cost(tiles, best_split(tiles, tile_m, cfg.split_k, k_tiles, slots), tile_m, slots)

    return replace(cfg, tile_m=min(sorted(SWAP_TILE_M, reverse=True), key=cost))


# Rasterization of the persistent schedule for large problems (session 13, H100, benchmarks/experiments/
# int8_swizzle.py; the tables are in docs/int8_scaled_mm.md). cutlass.utils' scheduler walks clusters M-fastest; with
# a swizzle of S it walks S clusters of one dimension before advancing the other, so that a wave touches fewer
# operand panels (int8 8192^3: all of A, 64 MB, once per wave without it; ~1 GB of DRAM reads per call) and the
# power-capped GPU keeps a higher clock. A/B against the plain order, sustained TOPS / TFLOPS: int8 8192^3 1329-1333
# -> 1409-1422 (S = 4 over N clusters, 1x2 clusters), FP8 8192^3 1093-1095 -> 1153-1164 and 4096 x 7168 x 16384
# 972-985 -> 1043 (S = 4 over M clusters, 2x1 clusters). Swizzling the other dimension lost up to 20%; a swizzle that
# does not divide the cluster count adds idle phantom tiles (FP8 8192^3 has 43 N tiles: -5%); int8 4096 x 14336 x 4096,
# whose A (16 MB) stays in L2 anyway, was 1-2% slower, hence RASTER_MIN_BYTES.
RASTER_SWIZZLE = (4, 2)  # tried in this order; the first that divides the swizzled cluster count is used
RASTER_MIN_WAVES = 4  # smaller problems keep the plain order
RASTER_MIN_BYTES = 32 << 20  # per batch: the operand the raster walks (A for 1x2 clusters, B for 2x1), 1-byte elements
# Below RASTER_MIN_BYTES the plain order of 2x1 clusters runs N fastest when A is the operand that exceeds it: M
# fastest, every wave takes ~132 token tiles of one weight column, so each of the N / tile_n columns re-reads all of A
# from DRAM (M = 30720, K = 7168: 4.6 GB a call). Session 39 (H100, fp8_raster_rule39.py in the data archive's
# session43/moved/, FP8 blockwise 128x192 / 128x128 2x1; docs/fp8_blockwise.md): the five problems it changes (M =
# 8192-16384, A 34-117 MB, B 8-29 MB) ran 0.71-0.91x the old time; three it leaves alone 1.00-1.03x. False restores the
# old rule.
RASTER_ALONG_N_FOR_LARGE_A = True


def raster_for(cfg: TileConfig, m: int, n: int, k: int, batch: int = 1, sm_count: int = 132) -> tuple[int, bool]:
    """(swizzle, raster_along_m) of the persistent schedule for the kernel's (M, N, K) problem with config ``cfg``:
    swizzle S > 1 over the clusters of the dimension a 2-CTA cluster spans (N for 1x2, M for 2x1), rastering along
    the other, on unsplit multi-wave problems whose walked operand exceeds L2; otherwise the plain order, M fastest -
    or, for 2x1 clusters whose A exceeds L2 while B does not, N fastest (``RASTER_ALONG_N_FOR_LARGE_A``)."""
    # (The decode-size rows, split-K or swapped, are not 2-CTA clusters.)
    if cfg.swap_ab or cfg.cluster_m * cfg.cluster_n != 2:
        return 1, True
    tiles_m, tiles_n = -(-m // cfg.tile_m), -(-n // cfg.tile_n)
    along_m = cfg.cluster_n == 2  # 1x2 clusters: swizzle N clusters, raster along M; 2x1: the reverse
    if tiles_m * tiles_n * batch < RASTER_MIN_WAVES * sm_count:
        return 1, True
    if (m if along_m else n) * k < RASTER_MIN_BYTES:
        # The walked operand fits L2; the other one is re-read per wave column (RASTER_ALONG_N_FOR_LARGE_A)
        along_n = RASTER_ALONG_N_FOR_LARGE_A and not along_m and m * k >= RASTER_MIN_BYTES
        return 1, not along_n
    clusters = -(-tiles_n // 2) if along_m else -(-tiles_m // 2)
    swizzle = next((sz for sz in RASTER_SWIZZLE if clusters % sz == 0), 1)
    return swizzle, along_m


# K-tiles of the weight each CTA's producer loads into its shared-memory ring before the PDL wait
# (``Sm90GemmKernel.weight_preload``), per op: ((most tokens, K-tiles), ...), the first row whose token count covers M.
# Back to back, a CTA of the next call becomes resident when the previous call's CTA on its SM exits, so these loads
# run in the previous call's tail, when the memory system is partly idle. Measured on an H100 (session 27,
# weight_preload.py in the data archive's session45/moved/, CUDA-graph medians of back-to-back calls over rotated
# weights): int8 at 1-64 tokens 0.89-0.98x the time with 8 K-tiles (4096^2 at 16 tokens 8.84 -> 7.89 µs), 128 tokens
# 0.97-0.99x with 4;
# FP8 at 1 token 0.89-0.99x with 8, at 64-128 tokens 0.92-1.00x with 4 (8 was up to 1.10x slower there, and 24576 x
# 1536 at 128 tokens is 1.02x slower with 4). With a foreign kernel between the calls (no overlap) 4 K-tiles are
# neutral (0.97-1.01x), 8 within 0.98-1.03x on the rows that use them. The weight-only WGMMA path preloads 2 stages of
# 1/2-bit weights (``weight_only.wgmma.stage_options``: 0.91-0.99x); 4-bit and AWQ were 1.00-1.04x slower with 4
# stages and 1.04-1.15x with the whole ring, so they do not - except on 16-token tiles whose K is split, where 4
# stages with the L2 warm-up off measured 0.92-1.00x (session 28).
# Contract: the weight - for the weight-only kernels with its group scales and zero points (the WGMMA path's staged
# parameter words, the AWQ decode tiles' first step since session 47) - is read before the previous kernel on the
# stream has completed. That kernel cannot have written it unless it triggers programmatic dependent launch early (no
# torch, cuBLAS-through-torch or cute_kernels op writes an int8 / FP8 / packed weight or its cached repack);
# CUTE_KERNELS_WEIGHT_PRELOAD=0 turns the preload off.
WEIGHT_PRELOAD = {"int8": ((64, 8), (None, 4)), "fp8": ((16, 8), (None, 4))}
WEIGHT_PRELOAD_ENABLED = os.environ.get("CUTE_KERNELS_WEIGHT_PRELOAD", "1") != "0"


def weight_preload_ktiles(op: str, m: int) -> int:
    """K-tiles of the weight preloaded before the PDL wait for ``op`` ("int8", "fp8") at M tokens (``WEIGHT_PRELOAD``);
    0 when disabled."""
    if not WEIGHT_PRELOAD_ENABLED:
        return 0
    return next(ktiles for most, ktiles in WEIGHT_PRELOAD[op] if most is None or m <= most)


# Tile widths an unswapped int8 row may take instead of its own (keyed by the row's tile_n), picked by the wave model
# (``fit_tile_width``) with these per-column cost factors; ties keep the row's width. Measured on an H100 (session 23,
# wave_fit.py (data archive session44/moved/), CUDA-graph medians, µs shipped -> fitted):
# * 129-512 tokens on 4096-wide layers: 128x128 tiles are 2 x 32 = 64 tiles at M = 256 (half the SMs idle); 128x64
#   makes 128: M = 192 / 256, N = K = 4096 15.60 / 15.10 -> 11.89 / 11.37; 4096 x 14336 40.88 / 40.48 -> 31.94 /
#   31.99. At M = 384 (96 tiles of 128 or 192 of 64: the same waves x width, the tie keeps 128) 128x64 was 1.15-1.34x
#   slower.
# * 14336-row layers above 512 tokens: 8 x 56 = 448 tiles of 128x256 are 3.4 waves; 128x224 makes 512 (3.9): M = 1024
#   104.9 -> 95.1. At M = 4096 the model ties and 224 measured the same (342.6 / 339.6). The 1.02 keeps 256 where the
#   model finds only a sliver (8192^3: 16 waves of 256 against 17.9 of 224).
# * Session 24 (H100, WF_INT8_CHECK, layers session 23 had not measured): 128x64 at 1.0 per column also took
#   13824 x 5120 at M = 384 / 512, where it was 1.13 / 1.26x slower (77.4 / 88.4 vs 68.6 / 70.1 µs: 7 waves of 64
#   against 4 of 128, the model's 12% edge not enough for the narrow tile's overhead once the GPU is full). At 1.2 it
#   keeps 128 there and still takes 64 where it won by 10-49% (11008 x 4096 at M = 200 / 256, 4096 x 11008, 3072 x 4096
#   and 2048 x 16384 at M = 200-512, and every point above); 28672 x 8192, 5120 x 13824 and 6144 x 4096 within 2% either
#   way. The 1.15-1.33 range gives the same picks on every measured problem.
# Not taken: FP8 (docs/fp8_blockwise.md, session 23) - 112-wide tiles on the 7168-row layers were 2-27% slower at
# every M measured.
INT8_TILE_WIDTHS = {128: (128, 64), 256: (256, 224)}
INT8_TILE_WIDTH_COST = {64: 1.2, 128: 1.0, 224: 1.02, 256: 1.0}


def whole_cluster_tiles(cfg: TileConfig, m: int, n: int, batch: int) -> int:
    """Output tiles of an unswapped (M, N) problem under ``cfg``, each dimension rounded up to whole clusters."""
    def whole(count: int, cluster: int) -> int:
        return -(-count // cluster) * cluster

    return whole(-(-m // cfg.tile_m), cfg.cluster_m) * whole(-(-n // cfg.tile_n), cfg.cluster_n) * batch


def wave_cost(cfg: TileConfig, m: int, n: int, k: int, batch: int, sm_count: int) -> float:
    """Persistent waves of an unswapped (M, N, K) problem's tiles (whole clusters) under ``cfg``, the last wave split
    as ``tail_split`` plans it when ``cfg.split_tail`` allows (a fraction of a wave then)."""
    csize = cfg.cluster_m * cfg.cluster_n
    slots = max(1, cfg.slots(sm_count) // csize)
    units = whole_cluster_tiles(cfg, m, n, batch) // csize
    if cfg.split_tail > 1:
        return tail_split(units, slots, cfg.split_tail, -(-k // 128))[0]
    return float(-(-units // slots))


def fit_tile_width(cfg: TileConfig, m: int, n: int, batch: int, sm_count: int, widths, cost_factor,
                   k: int = 0) -> TileConfig:
    """``cfg`` at the width among ``widths`` (the first is its own) with the fewest persistent waves x tile width x
    ``cost_factor[width]``; the output tiles are rounded up to whole clusters, and with ``cfg.split_tail`` the last wave
    counts as ``tail_split`` plans it for K = ``k``. Ties keep the earlier width."""
    def cost(w):
        at_w = replace(cfg, tile_n=w)
        if cfg.split_tail > 1:
            return wave_cost(at_w, m, n, k, batch, sm_count) * w * cost_factor[w]
        return split_cost(whole_cluster_tiles(at_w, m, n, batch), 1, w, cfg.slots(sm_count)) * cost_factor[w]

    return replace(cfg, tile_n=min(widths, key=cost))


def select_sm90_int8(m: int, n: int, k: int, batch: int = 1, sm_count: int = 132) -> TileConfig:
    """The table's row for M; for the swapped rows, the weight-tile height that the wave model prefers; for the
    unswapped rows, the tile width it prefers (``INT8_TILE_WIDTHS``)."""
    cfg = next(c for max_m, c in SM90_INT8_TABLE if m <= max_m)
    if cfg.swap_ab:
        return size_swapped_tile(cfg, m, n, k, batch, sm_count)
    widths = INT8_TILE_WIDTHS.get(cfg.tile_n)
    return fit_tile_width(cfg, m, n, batch, sm_count, widths, INT8_TILE_WIDTH_COST, k) if widths else cfg


def shipped_sm90_int8_configs() -> list[TileConfig]:
    """Every config the table can return (CI compiles each one and checks its SASS). A split row also ships its
    unsplit sibling: the host runs that one when the wave model picks a single K slice (``ops.split_k``)."""
    seen: list[TileConfig] = []
    rows = [replace(cfg, tile_n=w) for _, cfg in SM90_INT8_TABLE
            for w in (() if cfg.swap_ab else INT8_TILE_WIDTHS.get(cfg.tile_n, ())) or (cfg.tile_n,)]
    for cfg in rows:
        for tile_m in (SWAP_TILE_M if cfg.swap_ab else (cfg.tile_m,)):
            for split_k, split_tail in dict.fromkeys(((cfg.split_k, cfg.split_tail), (1, 1))):
                c = replace(cfg, tile_m=tile_m, split_k=split_k, split_tail=split_tail)
                if c not in seen:
                    seen.append(c)
    return seen


__all__ = ["TileConfig", "SM90_INT8_TABLE", "select_sm90_int8", "shipped_sm90_int8_configs", "size_swapped_tile",
           "replace"]
