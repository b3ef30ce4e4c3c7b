"""Host side of the weight-only WGMMA path (``sm90/weight_only_wgmma.py``): the weight blob, the tile choice, compile
and launch. Serves 1/2/4/8-bit formats (the seed's signed codes with optional group scales, and AWQ) with fp16/bf16
activations at the token counts between the decode path and the dense path (``config.py`` decides where).

The blob. The kernel wants each thread's WGMMA A fragment of a K-tile in a few consecutive 32-bit words, so the
codes are re-ordered once per weight tensor (``blob_from_packed``, in chunks of rows) and cached beside it
(``cached_blob``: keyed by the source tensor's storage and version, dropped when the source is garbage collected,
like ``awq_repack``). The blob holds the same bits as the packed weight (plus padding of N to 64 rows and K to 64
values). The codes are the formats' own (``formats.bitpack`` / ``awq_repack``): the decode is the one the mma.sync
kernel runs.
"""

import math
import weakref
from dataclasses import replace
from functools import lru_cache

import torch

from ..configs import TileConfig, best_split, tail_split
from ..formats.bitpack import int32_bits
from ..ops.split_k import cluster_split
from ..jit_cache import cached_compile
from ..plan_cache import cached_for_tensor
from .formats import OneFma, format_by_key

BLOCK_ROWS = 64
K_TILE = 64
THREADS = 128  # one warpgroup per 64-row block
MAX_SPLIT_K = 8

# ---------------------------------------------------------------------------------------------------- the blob
def codes_from_packed(packed: torch.Tensor, bits: int, k: int) -> torch.Tensor:
    """uint8 [N, K * bits / 8] packed LSB-first (value k at bit (k * bits) % 8 of byte k * bits // 8) -> the raw
    codes uint8 [N, k] (not decoded: a code is what the format's decode reads)."""
    per_byte = 8 // bits
    shifts = torch.arange(0, 8, bits, device=packed.device, dtype=torch.uint8)
    codes = (packed.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(packed.shape[0], packed.shape[1] * per_byte)[:, :k]

@lru_cache(maxsize=None)
def _fragment_index(bits: int, fmt_key: str) -> tuple[list[int], int]:
    """For one 64 x 64 block: the flat (row * 64 + k) index of every code of the blob's block order [thread, word,
    element] (elements of a word LSB-first), and the elements per word. Pair P = 4 * kb + p of a thread's K-tile is
    pair P % ppw of word P // ppw (see WeightOnlyWgmmaSm90.decode); pair q of a word holds elements
    ``pair_elems(q)`` = (low half, high half), i.e. K c and c + 1 of the pair's row."""
    fmt = format_by_key(fmt_key)
    epw, ppw = fmt.values_per_word, fmt.pairs_per_word
    element_of = {}
    for q in range(ppw):
        lo, hi = fmt.pair_elems(q)
        element_of[lo], element_of[hi] = (q, 0), (q, 1)
    index = []
    for t in range(THREADS):
        warp, lane = divmod(t, 32)
        g, t4 = divmod(lane, 4)
        for word in range(bits):
            for e in range(epw):
                q, half = element_of[e]
                pair = word * ppw + q
                kb, p = divmod(pair, 4)
                row = warp * 16 + g + 8 * (p % 2)
                kk = kb * 16 + 2 * t4 + 8 * (p // 2) + half
                index.append(row * K_TILE + kk)
    return index, epw

def blob_from_codes(codes: torch.Tensor, bits: int, fmt_key: str) -> torch.Tensor:
    """codes [N, K] (integers in [0, 2^bits)) -> int64 blob [ceil(N/64), ceil(K/64) * W], W = 64 * bits: block
    (row block rb, K-tile kt) at [rb, kt * W:(kt + 1) * W] (see the kernel's docstring); padding codes are 0."""
    n, k = codes.shape
    rb, kt = -(-n // BLOCK_ROWS), -(-k // K_TILE)
    padded = torch.zeros((rb * BLOCK_ROWS, kt * K_TILE), dtype=torch.int64, device=codes.device)
    padded[:n, :k] = codes.to(torch.int64)
    blocks = padded.view(rb, BLOCK_ROWS, kt, K_TILE).permute(0, 2, 1, 3).reshape(rb, kt, BLOCK_ROWS * K_TILE)
    index, epw = _fragment_index(bits, fmt_key)
    idx = torch.tensor(index, device=codes.device)
    vals = blocks[:, :, idx].view(rb, kt, THREADS * bits, epw)
    shifts = torch.arange(epw, device=codes.device, dtype=torch.int64) * bits
    words = (vals << shifts).sum(-1)  # < 2^32
    words = int32_bits(words)
    return words.reshape(rb, kt * THREADS * bits).view(torch.int64)

def codes_from_blob(blob: torch.Tensor, bits: int, fmt_key: str, n: int, k: int) -> torch.Tensor:
    """The inverse of ``blob_from_codes`` (tests and inspection): int64 blob -> codes [n, k] int64."""
    rb = blob.shape[0]
    words = blob.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    kt = words.shape[1] // (THREADS * bits)
    index, epw = _fragment_index(bits, fmt_key)
    shifts = torch.arange(epw, device=blob.device, dtype=torch.int64) * bits
    vals = (words.view(rb, kt, THREADS * bits, 1) >> shifts) & ((1 << bits) - 1)
    blocks = torch.zeros((rb, kt, BLOCK_ROWS * K_TILE), dtype=torch.int64, device=blob.device)
    blocks[:, :, torch.tensor(index, device=blob.device)] = vals.reshape(rb, kt, -1)
    dense = blocks.view(rb, kt, BLOCK_ROWS, K_TILE).permute(0, 2, 1, 3).reshape(rb * BLOCK_ROWS, kt * K_TILE)
    return dense[:n, :k]

CHUNK_CODES = 1 << 22  # codes per chunk of rows while a blob is built (int64 temporaries of ~32 MB each)


def blob_from_row_chunks(n: int, k: int, bits: int, fmt_key: str, codes_of, device, chunk_rows: int | None = None):
    """``blob_from_codes`` of an N x K weight whose codes ``codes_of(r0, r1)`` gives for rows r0..r1 ([r1 - r0, K]
    integers), a chunk of 64-row blocks at a time so that the temporaries stay small next to the layer (an
    8192 x 28672 weight in one piece would take several GB of int64 intermediates)."""
    blob = torch.empty((-(-n // BLOCK_ROWS), -(-k // K_TILE) * BLOCK_ROWS * bits), dtype=torch.int64, device=device)
    step = chunk_rows or max(BLOCK_ROWS, CHUNK_CODES // max(k, 1) // BLOCK_ROWS * BLOCK_ROWS)
    for r0 in range(0, n, step):  # step is whole row blocks: every chunk starts at a block boundary
        r1 = min(n, r0 + step)
        blob[r0 // BLOCK_ROWS:-(-r1 // BLOCK_ROWS)] = blob_from_codes(codes_of(r0, r1), bits, fmt_key)
    return blob


def blob_from_packed(packed: torch.Tensor, bits: int, fmt_key: str, k: int, chunk_rows: int | None = None):
    """``blob_from_row_chunks`` of a packed weight (uint8 [N, K * bits / 8], LSB-first)."""
    return blob_from_row_chunks(packed.shape[0], k, bits, fmt_key,
                                lambda r0, r1: codes_from_packed(packed[r0:r1], bits, k), packed.device, chunk_rows)


_blobs: dict[tuple, torch.Tensor] = {}


@lru_cache(maxsize=None)
def blob_order(bits: int, fmt_key: str) -> tuple:
    """What a format's blob depends on: the pairing of each word's elements. Formats that pair alike (``awq`` and
    ``awq_fma``, ``int4`` and ``int4_fma``) share one blob, so a weight run in both keeps one copy."""
    fmt = format_by_key(fmt_key)
    return (bits,) + tuple(fmt.pair_elems(q) for q in range(fmt.pairs_per_word))


def cached_blob(packed: torch.Tensor, bits: int, fmt_key: str, k: int) -> torch.Tensor:
    """The blob of ``packed`` (``blob_from_packed``), built on first use; rebuilt after an in-place update of
    ``packed`` (its version), dropped when ``packed`` is garbage collected; one per ``blob_order``."""
    key = (packed.data_ptr(), packed._version, tuple(packed.shape), packed.dtype, packed.device, bits,
           blob_order(bits, fmt_key), k)
    return cached_for_tensor(_blobs, key, packed, lambda: blob_from_packed(packed, bits, fmt_key, k))


def param_words(fmt_key: str, group_scales, zeros, dtype: torch.dtype) -> torch.Tensor:
    """The kernel's group parameters: int32 [groups * W, N], rows g * W .. g * W + W - 1 = the W decode-context
    words of group g (``WeightFormat.context_words``: the scale rounded to ``dtype``, x's - round to nearest, as the
    decode path's conversion of a loaded scale - in the low half of word 0; its high half the scale again (signed
    formats) or the one-fma formats' C (W = 1); ``awq``'s W = 2: the scale in both halves, then -(MAGIC + zero point)
    in both halves).
    N is the contiguous axis; the kernel's TMA takes a (rows of a tile x the groups of a stage) box of it."""
    from .formats import BF16, F16

    fmt = format_by_key(fmt_key)
    ct = F16 if dtype == torch.float16 else BF16
    scale16 = None if group_scales is None else group_scales.to(dtype).view(torch.int16).to(torch.int64) & 0xFFFF
    z = None if zeros is None else zeros.to(torch.int64)
    # OneFma formats: the 2^e their words are scaled by (``WgmmaPlan`` multiplies the scale with it)
    exponent = (fmt.scale_exponent(ct, scale16),) if isinstance(fmt, OneFma) else ()
    words = torch.stack(fmt.context_words(ct, scale16, z, *exponent), dim=-1)  # [N, groups, W]
    words = int32_bits(words)
    params = words.flatten(1).t().contiguous()
    if exponent:
        params.scale_exponent = exponent[0]
    return params


_params: dict[tuple, torch.Tensor] = {}


def cached_params(fmt_key: str, group_scales, zeros, dtype: torch.dtype) -> torch.Tensor:
    """``param_words`` of these tensors, built on first use and kept while the first of them lives (rebuilt after
    an in-place update of either: their versions are in the key)."""
    key = tuple((t.data_ptr(), t._version, tuple(t.shape), t.dtype) if t is not None else None
                for t in (group_scales, zeros)) + (fmt_key, dtype)
    source = group_scales if group_scales is not None else zeros
    return cached_for_tensor(_params, key, source, lambda: param_words(fmt_key, group_scales, zeros, dtype))


def clear_cache() -> None:
    _blobs.clear()
    _params.clear()

# ---------------------------------------------------------------------------------------------------- tiles
TILE_N_CHOICES = (16, 32, 64, 128, 256)  # tokens per tile (WGMMA N; 8 does not fit the epilogue's stmatrix tiling)
SMALL_LAYER_MAX_TILE_N = 32  # small layers take 64-row tiles, two CTAs per SM, up to this token width (measured)

def select_config(m: int, n: int, k: int, sm_count: int = 132) -> TileConfig:
    """The narrowest token width that covers M (256 above) x 128 weight rows (two consumer warpgroups), or, on
    layers of fewer than ``config.WGMMA_LARGE_LAYER`` weights at <= ``SMALL_LAYER_MAX_TILE_N`` tokens, 64 rows (one
    consumer warpgroup) with two CTAs per SM; K split in up to 8 slices where the tiles alone leave SMs idle (the wave
    model of ``configs.best_split``, over 64-value K-tiles and the config's CTA slots) - except where that would make
    more than ``SPLIT_MAX_WAVES`` waves of 16-token 128-row (tile, slice) units: there whole tiles, with the last
    partial wave split as ``configs.tail_split`` prices it (``split_tail``).

    Session 20 (H100, ``benchmarks/experiments/wo_wgmma_small.py`` variant m64c2, two runs): on 4096^2 the small
    tiles were 3-7% faster at 8-32 tokens for AWQ, int4 (with and without g128 scales), int2 and int1 (AWQ M = 16
    8.0 / 8.1 -> 7.6 / 7.7 us, M = 32 9.0 / 9.3 -> 8.6 / 8.8); on the three layers of >= 58.7M weights they were
    even or slower (14336 x 4096 M = 32 up to 6%). More CTAs per SM without the smaller tile (two 128-row CTAs with
    two A fragments in flight, which their register share forces) and three or four 64-row CTAs were slower or even
    everywhere: the per-K-tile cost of this path is not a latency that more resident warps hide."""
    from .config import WGMMA_LARGE_LAYER

    if m > LARGE_M_FROM:
        return large_m_config(m, n, k, sm_count)
    tile_n = next((t for t in TILE_N_CHOICES if t >= m), TILE_N_CHOICES[-1])
    small = n * k < WGMMA_LARGE_LAYER and tile_n <= SMALL_LAYER_MAX_TILE_N
    cfg = TileConfig(tile_m=64 if small else 128, tile_n=tile_n, cluster_m=1, cluster_n=1,
                     ctas_per_sm=2 if small else 1)
    tiles, k_tiles, slots, slices, many = _every_tile_split(cfg, m, n, k, sm_count)
    if many:  # whole tiles, the last partial wave split
        return replace(cfg, split_k=1, split_tail=tail_split(tiles, slots, MAX_SPLIT_K, k_tiles)[1])
    return replace(cfg, split_k=slices)


def _every_tile_split(cfg: TileConfig, m: int, n: int, k: int, sm_count: int):
    """(tiles, 64-value K-tiles, CTA slots, slices) of splitting every tile of ``cfg`` the wave model's way
    (``configs.best_split``), and whether that makes more than ``SPLIT_MAX_WAVES`` waves of 16-token 128-row units."""
    tiles, k_tiles, slots = -(-n // cfg.tile_m) * -(-m // cfg.tile_n), -(-k // K_TILE), cfg.slots(sm_count)
    slices = best_split(tiles, cfg.tile_m, MAX_SPLIT_K, k_tiles, slots)
    many = cfg.tile_m == 128 and cfg.tile_n == 16 and tiles * slices > SPLIT_MAX_WAVES * slots
    return tiles, k_tiles, slots, slices, many


def many_waves(n: int, k: int, sm_count: int) -> bool:
    """Whether splitting every 16-token tile of an N x K layer would make more than ``SPLIT_MAX_WAVES`` waves of units:
    the layers ``select_config`` gives tail-split plans."""
    return _every_tile_split(select_config(1, n, k, sm_count), 1, n, k, sm_count)[-1]


def full_wave(n: int, k: int, sm_count: int) -> bool:
    """Whether the 16-token plan of an N x K layer has at least one full wave of whole tiles (a many-wave layer whose
    tiles fill every CTA slot, unlike the 96 tiles of 12288 rows on 132 SMs)."""
    cfg = select_config(1, n, k, sm_count)
    return -(-n // cfg.tile_m) >= cfg.slots(sm_count)


# Session 32 (H100, benchmarks/experiments/wo_tail_split.py, AWQ / int4 g128 / int2 at 1, 8 and 16 tokens; docs/
# weight_only.md): where ``configs.best_split`` splits every 16-token tile into more than this many waves of (tile,
# slice) units (layers of 12288 to 24576 rows: 2.9-3.9 waves), whole tiles with the last partial wave split
# (``configs.tail_split``, the int8 / FP8 tail plans of session 25, which pick 1-4 slices here) ran 0.69-0.86x the
# time on every measured row: AWQ at one token 22016 x 4096 33.7 -> 24.0 us, 18432 x 7168 43.9 -> 35.6, 24576 x 1536
# 15.7 -> 12.4, 12288 x 4096 (96 tiles: no tail, whole tiles) 18.5 -> 14.9. Up to two waves the per-tile split stays
# (9216 / 11008 rows, 1.6-1.95 waves, where whole tiles took 0.91-1.20x its time: slower at long K). Wider token tiles
# and the 64-row tiles of small layers were not measured and keep the per-tile split.
SPLIT_MAX_WAVES = 2

# Above 128 tokens the tiles are compute-bound and a K split costs a round trip of the 128 x tile_n fp32 partial sums,
# which the weight-streaming wave model of ``configs.best_split`` (fitted at decode sizes) does not see: it split
# 14336 x 4096 at 1024 tokens in two, 220.6 us against 179.2 unsplit (8-bit; AWQ 226.2 / 187.1). Session 21 (H100,
# benchmarks/experiments/wo_wgmma_small.py int8 / awq, variants ship / s1 / s2 / n128 / n128s1 at 256 / 768 / 1024
# tokens on four layers; docs/weight_only.md) fitted, per 128-row tile: (us per 64-value K-tile, us per split round's
# fix-up) for each token width.
LARGE_M_FROM = 128
LARGE_M_TILE_COST = {256: (0.65, 14.0), 128: (0.42, 5.4)}


def large_m_cost(m: int, n: int, k: int, tile_n: int, slices: int, sm_count: int) -> float:
    """Modelled time (us) of 128 x tile_n tiles in ``slices`` K slices: persistent rounds x (the largest slice's
    K-tiles x the per-K-tile cost + the fix-up of a split)."""
    per_k_tile, fixup = LARGE_M_TILE_COST[tile_n]
    units = -(-n // 128) * -(-m // tile_n) * slices
    k_tiles = -(-k // K_TILE)
    return -(-units // sm_count) * (-(-k_tiles // slices) * per_k_tile + (fixup if slices > 1 else 0.0))


def large_m_config(m: int, n: int, k: int, sm_count: int) -> TileConfig:
    """The token width (256 or 128) and K split with the lowest ``large_m_cost``; ties go to the wider tile and to
    fewer slices. Among the measured points (session 21, 8-bit): 14336 x 4096 at 1024 tokens unsplit 256-token tiles
    (179.2 us; the old choice 220.6), 6144 x 4096 at 256 and 768 unsplit 128-token tiles (28.0 / 80.9; old 33.3 /
    101.3), 14336 x 4096 at 256 and 8192^2 at 1024 unsplit 256-token tiles, as before."""
    k_tiles = -(-k // K_TILE)
    best = {t: min(((large_m_cost(m, n, k, t, s, sm_count), s) for s in range(1, min(MAX_SPLIT_K, k_tiles) + 1)))
            for t in (256, 128)}
    tile_n = 128 if best[128][0] < best[256][0] else 256
    return TileConfig(tile_m=128, tile_n=tile_n, cluster_m=1, cluster_n=1, split_k=best[tile_n][1])


# Stages of each CTA's first tile whose packed weight and group parameters are loaded into the shared-memory ring
# before the PDL wait (Sm90GemmKernel.weight_preload): None = ``stage_options``' rule (2 for 1/2-bit weights, see
# configs.WEIGHT_PRELOAD); an int forces it (experiments).
WEIGHT_PRELOAD_STAGES = None
PRELOAD_LOW_BIT_STAGES = 2
PRELOAD_4BIT_STAGES = 4  # 4-bit weights on split 16-token tiles, with the L2 warm-up off (session 28)
# Consumers on mma.sync instead of WGMMA (``WeightOnlyWgmmaSm90.mainloop_sync``) for 1/2-bit weights at up to
# SYNC_MMA_MAX_M tokens, which then compute only the token tile's first 8 columns. Session 31 (H100,
# benchmarks/experiments/wo_sync_mma.py, int1 / int2 / int4 with and without g128 scales and AWQ at 1-16 tokens on the
# four layers of the issues; docs/weight_only.md): at 1-8 tokens 0.83-0.98x the WGMMA consumers' time for 1/2-bit
# weights on every layer (int2g 8192^2 at one token 13.8 -> 11.6 us). 4-bit weights and AWQ ran 0.94-1.03x (no
# consistent gain), and AWQ's 64-row tile spills a register in its 24-register producer with them, so they keep
# WGMMA; at 16 tokens (two 8-token chunks) the 1/2-bit results were mixed (0.92-1.07x).
# SYNC_MMA: None = this rule, True / False force it (experiments).
SYNC_MMA = None
SYNC_MMA_MAX_M = 8
SYNC_MMA_MAX_BITS = 2


def stage_options(bits: int, cfg: TileConfig, n: int, k: int) -> tuple:
    """Kernel options of one problem beyond the kernel's defaults (``WeightOnlyWgmmaSm90``; a sorted tuple of
    (name, value), part of the compile key): 4-bit weights on 32- and 64-token tiles of layers with
    >= ``config.WGMMA_LARGE_LAYER`` weights stage two K-tiles per stage (the default does so on 16-token tiles
    only), with the L2 warm-up at 4 stages on 32-token tiles and 2 on 64-token ones; 1/2-bit weights load their first
    ``PRELOAD_LOW_BIT_STAGES`` stages before the PDL wait (``Sm90GemmKernel.weight_preload``, session 27: 0.91-0.99x
    the time at 16-64 tokens back to back; see configs.WEIGHT_PRELOAD). Session 17 (H100,
    ``wo_wgmma_small.py`` k2 / k2w2 at 24-64 tokens): on the three layers of >= 58.7M weights 2-7% faster for AWQ and
    int4 g128 and up to 10% for int4 (8192^2 M = 64: 21.7 -> 19.8 us; one row, int4 14336 x 4096 at 48 tokens, 3%
    slower), while on 4096^2 the same options were 0-7% slower.
    4-bit weights on 16-token tiles whose K is split preload ``PRELOAD_4BIT_STAGES`` stages with the L2 warm-up off.
    Sessions 27 and 28 (H100, ``weight_preload.py`` variant 4/0, data archive session45/moved/, back to back), AWQ /
    int4 at 12 and 16 tokens: 4096^2 (64-row tiles in 4 slices) 0.916-0.963x / 0.945-0.978x the time, 8192^2 (2 slices)
    0.970-0.979x / 0.986-0.992x, 4096 x 14336 (4 slices) 0.997-1.003x; the unsplit tiles of 14336 x 4096 had AWQ
    1.01-1.02x slower, and 32-token tiles gained nothing (0.996-1.007x), so neither takes it."""
    from ..configs import WEIGHT_PRELOAD_ENABLED
    from .config import WGMMA_LARGE_LAYER

    if bits == 4 and cfg.tile_n in (32, 64) and n * k >= WGMMA_LARGE_LAYER:
        return (("k_tiles_per_stage", 2), ("l2_warmup", 4 if cfg.tile_n == 32 else 2))
    if bits == 4 and cfg.tile_n == 16 and cfg.split_k > 1 and WEIGHT_PRELOAD_ENABLED:
        return (("l2_warmup", 0), ("weight_preload", PRELOAD_4BIT_STAGES))
    if bits <= 2 and WEIGHT_PRELOAD_ENABLED:
        return (("weight_preload", PRELOAD_LOW_BIT_STAGES),)
    return ()


def shipped_configs() -> list[TileConfig]:
    """Every config ``select_config`` returns (split rows compile one variant for any slice count > 1)."""
    big = [TileConfig(tile_m=128, tile_n=t, cluster_m=1, cluster_n=1, split_k=s)
           for t in TILE_N_CHOICES for s in (1, MAX_SPLIT_K)]
    small = [TileConfig(tile_m=64, tile_n=t, cluster_m=1, cluster_n=1, split_k=s, ctas_per_sm=2)
             for t in TILE_N_CHOICES if t <= SMALL_LAYER_MAX_TILE_N for s in (1, MAX_SPLIT_K)]
    return big + small

# ---------------------------------------------------------------------------------------------------- compile
def build(fmt_key: str, x_dtype: torch.dtype, out_dtype: torch.dtype, scaled: bool, group: int, cfg: TileConfig,
          sm_count: int = 132, extra_options: str = "", kernel_options: dict | None = None, has_bias: bool = False):
    """Compile one variant from fake tensors; ``scaled``: the weights have group scales (AWQ always has). Call
    signature of the result: ``fn(blob, x, out, scale, params[, workspace, semaphores, num_splits, head])`` with torch
    tensors (``params``: ``param_words``, None without group parameters), scale a float (signed
    formats; ignored by AWQ's tree)."""
    import cutlass
    import cutlass.cute as cute

    from ..compile_utils import fake_stream, fake_tensor, fake_vector, kernel_view
    from ..epilogues import Accumulator, ColVector, Compute, EpilogueTree, ScalarArgument
    from ..sm90.weight_only_wgmma import WeightOnlyWgmmaSm90
    from .compile import cutlass_dtype

    fmt = format_by_key(fmt_key)
    xd, od = cutlass_dtype(x_dtype), cutlass_dtype(out_dtype)
    m, n, k = cute.sym_int32(), cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=8)
    f_blob = fake_tensor(cutlass.Int64, (cute.sym_int32(), cute.sym_int32(divisibility=2)), stride_div=2)
    # x may have more rows than out (``x_rows``: padded to whole token tiles); the tile grid comes from out
    fx = fake_tensor(xd, (cute.sym_int32(), k), stride_div=8)
    fo = fake_tensor(od, (m, n), stride_div=8)
    scaled = bool(scaled) or fmt.has_zeros  # AWQ always has scales
    f_params = fake_tensor(cutlass.Int32, (cute.sym_int32(), n), align=4) if scaled else None
    # AWQ's scales are in the decode; the signed formats' per-tensor scale (awq_fma's 2^e) multiplies the fp32
    # accumulator.
    root = Compute("mul", Accumulator(), ScalarArgument("scale")) if fmt.epilogue_scale else Accumulator()
    if has_bias:  # bias[n]: one value per weight row, the kernel's M (out is viewed transposed)
        root = Compute("add", root, ColVector("bias"))
    tree = EpilogueTree(root)
    kernel = WeightOnlyWgmmaSm90(cfg, tree, fmt, group, scaled, sm_count=sm_count, **(kernel_options or {}))
    options = f"--enable-tvm-ffi --gpu-arch sm_90a {extra_options}".strip()

    def operands(scale, params, bias):
        named = {"scale": scale, "params": params, "bias": bias}
        return tuple(named[name] for name in kernel.operand_names)

    # bias [N] in out's dtype: the last argument (after the stream; None in the plain variants)
    f_bias = (cute.runtime.make_fake_tensor(cutlass_dtype(out_dtype), (n,), stride=(1,), assumed_align=2),) \
        if has_bias else ()
    if cfg.split_k == 1:
        @cute.jit
        def launch(blob: cute.Tensor, x: cute.Tensor, out: cute.Tensor, scale: cutlass.Float32, params, stream,
                   bias=None):
            kernel(kernel_view(blob, 0, 1), kernel_view(x, 0, 1), kernel_view(out, 1, 0),
                   operands(scale, params, bias), stream)

        return cute.compile(launch, f_blob, fx, fo, cutlass.Float32(1.0), f_params, fake_stream(), *f_bias,
                            options=options)

    @cute.jit
    def launch_split(blob: cute.Tensor, x: cute.Tensor, out: cute.Tensor, scale: cutlass.Float32, params,
                     workspace: cute.Tensor, semaphore: cute.Tensor, num_splits: cutlass.Int32, head: cutlass.Int32,
                     stream, bias=None):
        kernel(kernel_view(blob, 0, 1), kernel_view(x, 0, 1), kernel_view(out, 1, 0), operands(scale, params, bias),
               stream, (workspace, semaphore, num_splits, head))

    f_ws = fake_vector(cutlass.Float32, cute.sym_int32(), align=16)
    f_sem = fake_vector(cutlass.Int32, cute.sym_int32())
    return cute.compile(launch_split, f_blob, fx, fo, cutlass.Float32(1.0), f_params, f_ws, f_sem, cutlass.Int32(1),
                        cutlass.Int32(0), fake_stream(), *f_bias, options=options)

def compile_wgmma(fmt_key: str, x_dtype, out_dtype, scaled: bool, group: int, cfg: TileConfig, sm_count: int,
                  options: tuple = (), has_bias: bool = False):
    """``build`` through the compile cache; ``options``: ``stage_options``."""
    split_cfg = cfg if cfg.split_k == 1 else replace(cfg, split_k=MAX_SPLIT_K)  # one variant for any slice count
    key = ("sm_90a", fmt_key, str(x_dtype), str(out_dtype), "params", bool(scaled), group, split_cfg.key, sm_count,
           options) + (("bias",) if has_bias else ())
    return cached_compile("weight_only_wgmma", key,
                          lambda: build(fmt_key, x_dtype, out_dtype, scaled, group, split_cfg, sm_count,
                                        kernel_options=dict(options), has_bias=has_bias))

def launch_variant(bits: int, cfg: TileConfig, sm_count: int, m: int, n: int, k: int):
    """(config to compile, kernel options, split plan or None) of one problem: ``stage_options`` (and the preload
    override), mma.sync consumers for 1/2-bit weights up to ``SYNC_MMA_MAX_M`` tokens, the K split of ``cfg.split_k``
    slices over every tile, or of ``cfg.split_tail`` slices over the last partial wave's tiles (the full waves' run
    whole: the plan's head), or - ``ops.split_k.cluster_split`` - the unsplit config with the slices reduced inside
    clusters (``split_cluster`` option, no scratch)."""
    tiles = -(-n // cfg.tile_m) * -(-m // cfg.tile_n)
    head = 0
    if cfg.split_tail > 1:  # the split variant runs it, with the split's stage options (as measured in session 32)
        head = tiles // cfg.slots(sm_count) * cfg.slots(sm_count)
        cfg = replace(cfg, split_k=cfg.split_tail, split_tail=1)
    options = stage_options(bits, cfg, n, k)
    if WEIGHT_PRELOAD_STAGES is not None:
        options = tuple(sorted([o for o in options if o[0] != "weight_preload"]
                               + ([("weight_preload", WEIGHT_PRELOAD_STAGES)] if WEIGHT_PRELOAD_STAGES else [])))
    if SYNC_MMA or (SYNC_MMA is None and m <= SYNC_MMA_MAX_M and bits <= SYNC_MMA_MAX_BITS):
        tokens = cfg.tile_n if m > cfg.tile_n else -(-m // 8) * 8  # one tile of m tokens: only its first m count
        options = tuple(sorted(options + (("sync_mma", tokens),)))
    split = None
    if cfg.split_k > 1:  # (slices, partial-sum words, split tiles, head: the tiles run whole first)
        split = (cfg.split_k, (tiles - head) * cfg.split_k * cfg.tile_m * cfg.tile_n, tiles - head, head)
    split_cluster = cluster_split(cfg, split, sm_count)
    if split_cluster > 1:
        cfg, split = replace(cfg, split_k=1), None
        options = tuple(sorted(options + (("split_cluster", split_cluster),)))
    return cfg, options, split


def splits_k(n: int, k: int, sm_count: int, m: int = 1) -> bool:
    """Whether M tokens of an N x K layer run every tile in several K slices (``select_config``; a tail-split plan,
    whose full waves run whole tiles, does not; the same for every M of one token tile)."""
    return select_config(m, n, k, sm_count).split_k > 1


def cluster_split_ctas(n: int, k: int, sm_count: int, m: int = 1) -> int:
    """CTAs of the launch of M tokens of an N x K layer when it reduces its K slices inside clusters
    (``launch_variant``'s ``split_cluster``: one cluster per tile, the same for every M of one token tile), else 0."""
    cfg = select_config(m, n, k, sm_count)
    slices = dict(launch_variant(4, cfg, sm_count, m, n, k)[1]).get("split_cluster", 1)
    return slices * -(-n // cfg.tile_m) * -(-m // cfg.tile_n) if slices > 1 else 0


def prepare(fmt_key: str, x_dtype, out_dtype, scaled: bool, group: int, cfg: TileConfig, sm_count: int, m: int,
            n: int, k: int, has_bias: bool = False):
    """(compiled fn, split plan or None) of one problem: what a launch needs besides its tensors."""
    cfg, options, split = launch_variant(format_by_key(fmt_key).bits, cfg, sm_count, m, n, k)
    return compile_wgmma(fmt_key, x_dtype, out_dtype, scaled, group, cfg, sm_count, options, has_bias), split


# ---------------------------------------------------------------------------------------------------- entry points
NO_GROUP = K_TILE  # the group of a call without group parameters (compiles one variant)


def eligible(x: torch.Tensor, bits: int, n: int, k: int, group: int | None, out_dtype: torch.dtype, arch: str) -> bool:
    """Whether this path can run the problem: an SM90 GPU, fp16/bf16 x with 16-byte rows and out in x's dtype, a
    1/2/4/8-bit format, 16-byte output rows (N % 8), and groups that tile the 64-value K-tile (32 or a multiple of
    64; None: no group parameters)."""
    return (arch == "sm_90a" and x.dtype in (torch.float16, torch.bfloat16) and out_dtype == x.dtype
            and bits in (1, 2, 4, 8) and k % 8 == 0 and n % 8 == 0
            and (group is None or group_tiles_k(group)))


def group_tiles_k(group: int) -> bool:
    """Groups that tile the 64-value K-tile: 32, or a multiple of 64."""
    return group == 32 or group % K_TILE == 0


PAD_X_ROWS = True  # ``x_rows``'s padding on/off (experiments time both)
X_PAD_MIN_ROWS = 96
X_PAD_TWO_TILES_MIN_N = 256  # two token tiles narrower than this move their last tile instead (``x_rows``)


def x_rows(m: int, tile_n: int) -> int:
    """Rows of x the kernel is given for M tokens: M, or M rounded up to whole token tiles (the launch then passes a
    zero-padded copy of x; out keeps its M rows, the stores of the padded columns are dropped at its edge) when at
    least ``X_PAD_MIN_ROWS`` rows of the last tile lie past x's end and there is one token tile, or two of at least
    ``X_PAD_TWO_TILES_MIN_N`` tokens. Otherwise the kernel moves its last token tile back to end at the last token
    (``Sm90GemmKernel.tile_shifts``, session 22), with no copy.

    Session 21 (H100; benchmarks/experiments/wo_partial_tile_split.py, 8-bit 8192^2, the kernel compiled with separate
    row counts for x and out): a TMA box of x running far past x's last row is what is slow - 128-token tiles at
    M = 129 80.6 us with x of 129 rows, 54.1 with x padded to 256 (out of 129 or 256 rows alike); M = 1 on one
    128-token tile 75.4 / 51.5; 256-token tiles at M = 257 140.5 / 82.5. wo_x_rows.py timed the ops with x padded to
    whole tiles and not, 17-1100 tokens on three layers, 8-bit and AWQ: the pad (an F.pad copy of x, ~4 us) lost
    wherever fewer than ~96 rows were past the end (16/32/64-token tiles: 15-32% slower on 4096^2) and on problems of
    three or more token tiles (4096^2 at 600 tokens 1.16x; 8192^2 at 1100 1.09x), and won where a tile of one or two
    ran far past it (8192^2 8-bit at 129 / 160 / 257 / 300 / 400 tokens 0.75 / 0.80 / 0.65 / 0.64 / 0.86x the time,
    14336 x 4096 at 129 0.76x, AWQ 0.78-0.99x). Why a box past the end costs so much is not established.
    Session 22 (H200, wo_x_rows.py, session 21's rule against the moved last tile, same machine): two 128-token
    tiles at 129 / 160 tokens ran 0.83-0.95x the padded time on 8-bit and AWQ 4096^2 and 8-bit 8192^2 (AWQ 8192^2
    1.02-1.05x); two 256-token tiles at 257 / 300 tokens ran AWQ 8192^2 1.07-1.10x (8-bit 0.98-1.00x), so those keep
    the pad. Three or more tiles: 0.90x at 400 tokens on 4096^2, 1.00-1.04x at 600."""
    tiles = -(-m // tile_n)
    if PAD_X_ROWS and tiles * tile_n - m >= X_PAD_MIN_ROWS and (
            tiles == 1 or (tiles == 2 and tile_n >= X_PAD_TWO_TILES_MIN_N)):
        return tiles * tile_n
    return m


class WgmmaPlan:
    """One problem shape's launch on this path, callable with the weight-only ops' warm-path signature
    ``plan(x, w, out, scale, group_scales, zeros, group)``: ``w`` is the format's packed weight (quantized_mm's
    ``w_packed``, or AWQ's repacked ``AwqKernelWeights.w``), whose blob and parameter words come from the last call's
    memo or the caches (``derived_operands``)."""

    def __init__(self, fmt_key: str, bits: int, cfg: TileConfig, sm_count: int):
        self.fmt_key, self.bits, self.cfg, self.sm_count = fmt_key, bits, cfg, sm_count
        self._key, self._launch = None, None  # the last call's variant: the warm path skips compile-cache keys
        self._derived = None  # the last call's sources and derived operands (``derived_operands``)

    def derived_operands(self, w, group_scales, zeros, x_dtype, k):
        """(blob, params) of these sources: ``cached_blob`` / ``cached_params``, whose keys cost ~1-2 µs of host
        time per call, behind a memo of the last call's. The memo holds weak references only (to the sources, and to
        the derived tensors, which the caches drop with their sources), so a plan keeps no weight alive; it is used
        only for the same tensor objects at the same storage and version (an in-place update misses)."""
        gs, z = group_scales, zeros
        stamp = (w.data_ptr(), w._version, x_dtype, k,
                 None if gs is None else gs.data_ptr(), None if gs is None else gs._version,
                 None if z is None else z.data_ptr(), None if z is None else z._version)
        memo = self._derived
        if memo is not None and memo[1] == stamp:
            refs = memo[0]
            if refs[0]() is w and (gs is None or refs[1]() is gs) and (z is None or refs[2]() is z):
                blob = memo[2]()
                params = memo[3]() if memo[3] is not None else None
                if blob is not None and (params is not None or memo[3] is None):
                    return blob, params
        sources = (w, gs, z)
        blob = cached_blob(w, self.bits, self.fmt_key, k)
        params = None
        if group_scales is not None or zeros is not None:
            params = cached_params(self.fmt_key, group_scales, zeros, x_dtype)
        self._derived = (tuple(None if t is None else weakref.ref(t) for t in sources), stamp, weakref.ref(blob),
                         None if params is None else weakref.ref(params))
        return blob, params

    def __call__(self, x, w, out, scale, group_scales, zeros, group, bias=None):
        blob, params = self.derived_operands(w, group_scales, zeros, x.dtype, x.shape[1])
        return self.launch(x, blob, params, out, scale, group, bias)

    def launch(self, x, blob, params, out, scale, group, bias=None):
        """Run on derived operands the caller already holds (AWQ's come from ``awq_sm90``, not from a repack)."""
        from ..ops.split_k import launch_planned

        m, k = x.shape
        if params is None:
            group = NO_GROUP
        key = (x.dtype, out.dtype, params is not None, group, m, out.shape[1], k, bias is not None)
        if key != self._key:
            self._launch = prepare(self.fmt_key, x.dtype, out.dtype, key[2], group, self.cfg, self.sm_count,
                                   m, out.shape[1], k, has_bias=bias is not None)
            self._key = key
        fn, split = self._launch
        rows = x_rows(m, self.cfg.tile_n)
        if rows != m:
            x = torch.nn.functional.pad(x, (0, 0, 0, rows - m))  # a zero-padded copy; the caller's x is untouched
        if params is not None and getattr(params, "scale_exponent", 0):
            scale = scale * 2.0 ** params.scale_exponent  # OneFma formats' words carry s 2^-e
        launch_planned(fn, (blob, x, out, float(scale), params), split, x.device, torch.float32, trailing=(bias,))
        return out


def quantized_mm_wgmma(x: torch.Tensor, w_packed: torch.Tensor, out: torch.Tensor, scale: float, bits: int,
                       group_scales, group: int, sm_count: int, cfg: TileConfig | None = None) -> torch.Tensor:
    """``quantized_mm`` on this path, for checked operands (``eligible``): x [M, K] with 16-byte rows."""
    m, k = x.shape
    cfg = cfg or select_config(m, w_packed.shape[0], k, sm_count)
    return WgmmaPlan(signed_format(bits, group_scales is not None, m), bits, cfg, sm_count)(
        x, w_packed, out, scale, group_scales, None, group)


# Session 34 (H100, awq_one_fma.py, archive session40/moved/, both formats forced on this path, three interleaved
# rounds, float64-checked; docs/weight_only.md): AWQ with one fma per pair (``formats.AwqInt4OneFma``: a subnormal code
# times s 2^(E - j - e) plus -z s 2^-e rounded once on the host) ran 0.92-1.00x the exact format's time at 1-256 tokens
# on six layers (12288 x 4096 0.92x, 4096^2 0.96-0.98x, 4096 x 14336 0.98-0.99x at 1-16 tokens), 0.97-1.00x at 512,
# 1.00x at 1024 and 1.00-1.03x at 2048; its max error relative to max|ref| 6-7e-4 against 4e-4 (fp16 x). So fp16 x takes
# it up to AWQ_ONE_FMA_MAX_M tokens. bf16 x keeps the exact format (C's rounding to bf16: 5.6e-3). () = always the exact
# format (experiments).
AWQ_ONE_FMA_DTYPES = (torch.float16,)
AWQ_ONE_FMA_MAX_M = 512


# Signed int4 with group scales on this path decodes with ``formats.SignedInt4OneFma`` up to this many tokens: the same
# values as the magic-number decode, bit for bit, with one fma per pair. None: never (experiments).
INT4_ONE_FMA_MAX_M: int | None = AWQ_ONE_FMA_MAX_M


def signed_format(bits: int, grouped: bool, m: int) -> str:
    """The format key of M tokens of the signed ``bits``-bit format (``grouped``: with group scales) on this path."""
    if bits == 4 and grouped and INT4_ONE_FMA_MAX_M is not None and m <= INT4_ONE_FMA_MAX_M:
        return "int4_fma"
    return f"int{bits}"


def awq_format(x_dtype: torch.dtype, kw, m: int) -> str:
    """The format key of M tokens with AWQ weights ``kw`` (anything with their ``max_abs_scale``:
    ``awq_sm90.AwqSm90Weights``, ``awq_repack.AwqKernelWeights``) on this path for x of ``x_dtype``: ``awq_fma``
    where ``AWQ_ONE_FMA_DTYPES`` has the dtype, M is at most ``AWQ_ONE_FMA_MAX_M`` and the scales are finite, else
    the exact ``awq``."""
    if x_dtype in AWQ_ONE_FMA_DTYPES and m <= AWQ_ONE_FMA_MAX_M and math.isfinite(kw.max_abs_scale):
        return "awq_fma"
    return "awq"
