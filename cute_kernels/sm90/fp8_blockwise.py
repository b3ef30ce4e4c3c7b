"""FP8 (e4m3) GEMM with blockwise / groupwise scale factors on SM90: the warp-specialized GEMM of ``gemm.py`` with a
two-level-accumulation mainloop.

Computes, for every batch l:
    D[m, n, l] = epilogue( sum_kb SFA[m // gM, kb, l] * SFB[n // gN, kb, l] * sum_{k in K-block kb} A[m, k, l] * B[n, k, l] )
  A: (M, K, L) and B: (N, K, L) float8_e4m3fn, K-major (as every 8-bit WGMMA operand); D: (M, N, L) fp16/bf16.
  SFA: (ceil(M/gM), K/gK, L) and SFB: (ceil(N/gN), K/gK, L) float32, any strides (read element by element).
  Granularity: gK = 128 = the K-tile; gM, gN any positive ints (1 = per-token "groupwise", 128 = "blockwise").
  With gN a multiple of 8 a CTA tile's columns fall into segments of gcd(tile_n, gN) columns, each inside one gN
  block (the tile starts at a multiple of tile_n): one SFB value per segment and K-tile (one per tile when
  gN % tile_n == 0; three for 192-wide tiles with gN = 128). Otherwise each column has its own SFB value
  (``per_column``: the host's swapped small-M problem puts the per-token scales on the N side). Rows: one SFA value
  per row the thread owns, or one per tile when gM is a multiple of tile_m (``rows_uniform``).

Everything but the mainloop is the base kernel: producer warp streaming A/B K-tiles with TMA into the smem ring,
persistent static tile schedule, epilogue tree -> stmatrix -> TMA store.

Mainloop (per consumer warpgroup, per K-tile = one scale block; K-tiles [k_begin, k_begin + k_tiles) of a split-K
slice):
  1. wait for the K-tile in shared memory and WGMMA its four k-blocks into a temporary fp32 accumulator, the first
     with ACCUMULATE off (a static per-k-block flag: the k-blocks are unrolled at trace time).
  2. wait for it, release the smem buffer to the producer, and promote: acc += tmp * (sfa_row * sfb_segment). The
     scales (one SFB value per column segment, one SFA value per accumulator row the thread owns: 2 per 64-row WGMMA
     atom) were loaded from global memory two K-tiles earlier, into registers the loop carries (measured: loading
     them in the same K-tile left their L2 latency exposed on every promotion, 714 vs 928 TFLOPS at 8192^3).
With per-token a_scale in a TMA-able layout (``sfa_tma``) the producer stages each K-tile's tile_m a_scale values in
shared memory with the stage instead (one TMA on the stage's full barrier), and the consumers read them after the
stage's wait; b_scale is still prefetched into registers.
This promotion is also what keeps FP8 precise: Hopper's FP8 WGMMA accumulates with a reduced-precision adder, so
each 128-deep partial sum goes into a true fp32 accumulator (DSL_PRIMER §11). With two consumer warpgroups, one
promotes while the other's WGMMAs keep the tensor cores busy. A 64-row tile has one consumer warpgroup, so it takes
K-tiles in pairs with two temporaries instead (``k_pair``): the first of a pair is promoted while the second one's
WGMMAs run.

Masked batches (``masked_dim``: MoE experts, ``fp8_blockwise_grouped_mm``) are the base kernel's too: its work list
holds only tiles with valid rows, so this mainloop never sees the others. So are row groups (``row_groups``:
``fp8_blockwise_grouped_mm_contiguous``): b_scale is read at the tile's expert, a_scale at the rows' own place.
Split-K (decode-size M) is the base kernel's: the fp32 partials go through the workspace and the last slice sums
them in slice order (deterministic).

Registers: acc + tmp are 2 x (tile_n / 2) fp32 per thread, so tile_n <= 192 (128x256 would need all 256); k_pair's
acc + 2 x tmp limit it to tile_n <= 128.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32
from cutlass.cute.nvgpu import warpgroup

from ..configs import TileConfig
from ..epilogues import EpilogueTree
from .gemm import Sm90GemmKernel

MAX_TILE_N = 192
PAIR_MAX_TILE_N = 128
PAIR_TILE_MS = (64,)  # tile heights that use k_pair (see __init__)
# The two consumer warpgroups of a 128-row tile taking the tensor cores in turns (``mainloop``): False (both issue
# freely), "complete" (the turn passes when a warpgroup's WGMMAs have completed) or "issue" (it passes as soon as they
# are issued: the other warpgroup's WGMMAs queue behind them, so the first one promotes while they run).
# "complete" measured 6-19% slower than issuing freely at every M >= 1024 and -5% to +6% on the 128-row split rows
# (H200, session 5, fp8_alternate.py in the data archive's dropped/; 8192^3 1037 -> 1178 us, ncu tensor pipe 69% -> 60%):
# the hand-over (WGMMA drain, barrier, issue, pipe fill) costs more than the overlap gains.
ALTERNATE_WARPGROUPS = False
# Where staging a_scale would cost an A/B stage: give the epilogue this many buffers (instead of 4) to keep the stage
# count, or 0 to load a_scale from global memory instead (``choose_stage_extra_bytes``). 0: 128x128 tiles staged with
# 3 epilogue buffers measured -6% to +1.5% against the consumer loads (H200, session 5, ABBA order,
# fp8_sfa_epi.py in the data archive's dropped/).
SFA_TMA_EPI_STAGES = 0


class Fp8BlockwiseGemmSm90(Sm90GemmKernel):
    """One compiled variant = (TileConfig, epilogue tree, (gM, gN, gK), D dtype, SM count)."""

    mainloop_operand_names = ("sfa", "sfb")
    # A K slice's scales are indexed from the slice's first K-tile (see ``mainloop``); False: from the tensor's, the
    # code before session 25 (experiments compare the two).
    slice_scales_from_zero = True

    def __init__(self, config: TileConfig, epilogue: EpilogueTree, granularity: tuple[int, int, int],
                 sm_count: int = 132, sfa_tma: bool = False, l2_warmup: int = 0, raster: tuple[int, bool] = (1, True),
                 weight_preload: int = 0, weight_operand: int = 1, split_cluster: int = 1,
                 masked_dim: int | None = None, row_groups: bool = False):
        g_m, g_n, g_k = granularity
        if g_k != 128:
            raise ValueError(f"scale granularity along K must be 128 (the K-tile of an FP8 WGMMA tile); got {g_k}")
        if config.tile_n > MAX_TILE_N:
            raise ValueError(f"tile_n={config.tile_n} must be <= {MAX_TILE_N} (acc + temporary accumulator registers)")
        if g_m < 1 or g_n < 1:
            raise ValueError(f"scale granularities must be positive; got ({g_m}, {g_n}, {g_k})")
        # The token dimension's last tile ends at the edge (``Sm90GemmKernel.tile_shifts``; M unswapped, N swapped)
        # where its scales follow any origin: per-row SFA (gM = 1) / per-column SFB (gN not a multiple of 8). A
        # weight dimension's blocks assume tiles at multiples of the tile size (``rows_uniform``, segments).
        # Row groups start every expert on a tile boundary: no M tile moves (``Sm90GemmKernel.row_groups``).
        clamp = (g_m == 1 and not row_groups, g_n % 8 != 0)
        super().__init__(config, epilogue, Float32, sm_count=sm_count, l2_warmup=l2_warmup, raster=raster,
                         clamp=clamp, weight_preload=weight_preload, weight_operand=weight_operand,
                         split_cluster=split_cluster, masked_dim=masked_dim, row_groups=row_groups)
        self.g_m, self.g_n, self.g_k = g_m, g_n, g_k
        if sfa_tma and g_m != 1:
            raise ValueError("sfa_tma stages per-token a_scale columns (gM = 1) only")
        # Per-token a_scale: the producer stages each K-tile's tile_m values with the A/B stage (one TMA on the
        # stage's full barrier, the seed's rule for scales a tile needs >= 32 of); the host asks for it when the
        # tensor allows a TMA (MN-major, 16-byte strides), else the consumers load them (``load_scales``).
        self.sfa_tma = sfa_tma
        # Column scales. gN a multiple of 8: the tile's columns fall into segments that share one SFB value (see the
        # module docstring). Otherwise (per-token activations on the N side of a swapped problem, gN = 1) each
        # column the thread owns has its own SFB value: 2 per 8-column group of the tile.
        self.per_column = g_n % 8 != 0
        self.seg_n = 1 if self.per_column else math.gcd(config.tile_n, g_n)
        self.n_segs = config.tile_n // 4 if self.per_column else config.tile_n // self.seg_n
        # Row scales. When gM is a multiple of the tile height every row of a tile shares one SFA value (the weight's
        # 128-row blocks on the M side of a swapped problem): one slot instead of one per row the thread owns.
        self.rows_uniform = g_m % config.tile_m == 0
        # Two temporaries (``k_pair``: one K-tile promoted under the next one's WGMMAs) for 64-row tiles, whose
        # single consumer warpgroup has nobody else to keep the tensor cores busy while it promotes; acc + 2 x tmp
        # (3 x tile_n / 2 registers per thread) must fit. Measured on the H200 (docs/fp8_blockwise.md): 64x128
        # split rows 3-16% faster (M = 64, N = 2112, K = 7168: 16.0 -> 13.5 us); 128x128 tiles with two warpgroups,
        # which already overlap each other's promotion, 10-27% slower at M >= 1024 (8192^3: 1165 -> 1411 us).
        self.pair_k_tiles = config.tile_m in PAIR_TILE_MS and config.tile_n <= PAIR_MAX_TILE_N
        # Two consumer warpgroups (128-row tiles) taking the tensor cores in turns (``mainloop``): off by default.
        if ALTERNATE_WARPGROUPS not in (False, "issue", "complete"):
            raise ValueError(f"ALTERNATE_WARPGROUPS must be False, 'issue' or 'complete'; got {ALTERNATE_WARPGROUPS!r}")
        self.alternate_warpgroups = bool(ALTERNATE_WARPGROUPS) and self.num_mma_wg == 2 and not self.pair_k_tiles
        self.hand_over_at_issue = ALTERNATE_WARPGROUPS == "issue"

    # ------------------------------------------------------------------ a_scale staged by the producer (sfa_tma)
    def choose_stage_extra_bytes(self, ab_bytes: int, epi_bytes: int) -> int:
        """The staged a_scale column (tile_m floats) - unless it would cost an A/B stage: 128x128 tiles then drop
        from 6 to 5 stages and measured 2-11% slower at M >= 1024 than with the consumers' loads, while the tiles
        that keep their stage count gained up to 6% (H200, session 5, docs/fp8_blockwise.md). Decided at trace
        time: the compiled kernel accepts the TMA-able tensors either way."""
        extra = self.config.tile_m * 4
        if self.sfa_tma and not self.config.stages:
            want = self.stages_that_fit(ab_bytes, epi_bytes)
            if self.stages_that_fit(ab_bytes + extra, epi_bytes) < want:
                fewer = SFA_TMA_EPI_STAGES
                epi_fewer = epi_bytes // self.epi_stages * fewer if fewer else epi_bytes
                if fewer and self.stages_that_fit(ab_bytes + extra, epi_fewer) >= want:
                    self.epi_stages = fewer  # one epilogue buffer less keeps the A/B stages
                else:
                    self.sfa_tma = False
        if self.sfa_tma and self.clamp[0]:
            # The staged a_scale box moves with a clamped tile, and its rows are the tensor's innermost dimension:
            # a start that is not 16-byte aligned (4 floats) is an illegal instruction (seen on the H200, session 22).
            self.clamp_align = (4, self.clamp_align[1])
        return extra if self.sfa_tma else 0

    def make_mainloop_tma(self, tensors: dict) -> tuple:
        if not self.sfa_tma:
            return ()
        return self.row_box_tma(tensors["sfa"], (self.config.tile_m, 1))

    def sfa_stages(self, sML: cute.Tensor) -> cute.Tensor:
        """The staged a_scale columns: (tile_m, 1, stage)."""
        tile_m = self.config.tile_m
        return cute.make_tensor(sML.iterator, cute.make_layout((tile_m, 1, self.ab_stages), stride=(1, 0, tile_m)))

    @cute.jit
    def prepare_mainloop_loads(self, mainloop_tma: tuple, sML: cute.Tensor):
        if cutlass.const_expr(not self.sfa_tma):
            return None
        return self.partition_row_boxes(mainloop_tma, self.sfa_stages(sML), (self.config.tile_m, 1))

    @cute.jit
    def issue_mainloop_loads(self, prepared, stage, bar, tile, shift, l_idx, k):
        if cutlass.const_expr(self.sfa_tma):
            self.issue_row_box(prepared, stage, bar, tile[0], k, l_idx, shift[0] if self.clamp[0] else None)

    @cute.jit
    def mainloop(self, tiled_mma: cute.TiledMma, ab_pipe, tCrA: cute.Tensor, tCrB: cute.Tensor, acc: cute.Tensor,
                 read, release, k_begin, k_tiles, tile, origin, tCcD: cute.Tensor, tensors: dict):
        sfa, sfb = tensors["sfa"], tensors["sfb"]  # (ceil(M/gM), KB, L), (ceil(N/gN), KB, L)
        if cutlass.const_expr(self.slice_scales_from_zero and not isinstance(k_begin, int)):
            # A K slice: its scales indexed from 0, as in the unsplit kernel (with the slice's first K-tile in every
            # index, the promotion loop's scale addressing took more registers and ran whole tiles 3-10% slower).
            sfa = cute.domain_offset((0, k_begin, 0), sfa)
            sfb = cute.domain_offset((0, k_begin, 0), sfb)
            k_begin = 0
        # Temporaries for one 64-row WGMMA atom; ``k_tile`` runs a warpgroup's atoms one after the other. With the
        # shipped tiles a warpgroup owns one atom; two per warpgroup (256-row tiles, acc 128 + tmp 64 registers)
        # compiled without spills and ran correctly but 7-18% slower than 128x128 (docs/fp8_blockwise.md).
        tmp = cute.make_rmem_tensor((acc.shape[0], 1, acc.shape[2]), Float32)
        # acc is ((2, 2, tile_n / 8), MMA_M, MMA_N): mode 0's middle sub-mode steps 8 rows; everything else is
        # columns or whole 64-row atoms, so a thread owns 2 x MMA_M distinct rows.
        rows_per_atom = cute.size(acc.shape[0][1])
        mma_m = cute.size(acc, mode=[1])
        row_blocks = []
        last_row_block = cute.size(sfa, mode=[0]) - 1  # rows past M (ragged tiles) reuse the last scale
        if cutlass.const_expr(self.rows_uniform):
            row_blocks.append(cutlass.min(origin[0] // self.g_m, last_row_block))
        else:
            for mm in cutlass.range_constexpr(mma_m):
                for j in cutlass.range_constexpr(rows_per_atom):
                    row = tCcD[((0, j, 0), mm, 0)][0]
                    row_blocks.append(cutlass.min(row // self.g_m, last_row_block))
        n_rows = len(row_blocks)  # 1 when rows_uniform, else the 2 x MMA_M rows the thread owns
        last_col_block = cute.size(sfb, mode=[0]) - 1  # columns past N (ragged tiles) reuse the last scale
        if cutlass.const_expr(self.per_column):
            # the thread's columns: 2 adjacent ones (fragment sub-mode 0) of each 8-column group (sub-mode 2)
            col_blocks = [cutlass.min(tCcD[((i, 0, c), 0, 0)][1] // self.g_n, last_col_block)
                          for c in range(self.config.tile_n // 8) for i in range(2)]
        else:
            col_blocks = [cutlass.min((origin[1] + s * self.seg_n) // self.g_n, last_col_block)
                          for s in range(self.n_segs)]
        batch = (tile[2], self.b_batch(tile))  # (a_scale's, b_scale's): B's differs with row groups
        k_last = k_begin + k_tiles - 1
        # sfa_tma: the thread's rows inside the tile index the staged a_scale column of each stage
        local_rows, s_sfa = None, None
        if cutlass.const_expr(self.sfa_tma):
            local_rows = [tCcD[((0, j, 0), mm, 0)][0] - origin[0]
                          for mm in range(mma_m) for j in range(rows_per_atom)]
            s_sfa = self.sfa_stages(tensors["smem"])

        # A K-tile's scales are loaded two K-tiles before its promotion (slot r < n_rows: a_scale of the thread's row r;
        # slot n_rows + s: b_scale of column segment s): a scale read from L2 takes about as long as a K-tile of WGMMA,
        # so loading it where it is used stalls every promotion. Two buffers, one per parity of the K-tile, each
        # reloaded right after its products are taken: no buffer is ever copied (a register copy would wait for its
        # load). Loads past the last K-tile re-read the last one.
        even = cute.make_rmem_tensor((n_rows + self.n_segs,), Float32)
        odd = cute.make_rmem_tensor((n_rows + self.n_segs,), Float32)
        factors = cute.make_rmem_tensor((n_rows * self.n_segs,), Float32)  # [row r, segment s] at r * n_segs + s
        scale_args = (sfa, sfb, row_blocks, col_blocks, batch, local_rows, s_sfa)
        self.load_scales(scale_args, k_begin, even)
        self.load_scales(scale_args, cutlass.min(k_begin + 1, k_last), odd)
        read.reset_count()
        release.reset_count()
        acc.fill(0)
        turns = None
        if cutlass.const_expr(self.alternate_warpgroups):
            # The two consumer warpgroups take the tensor cores in turns, K-tile by K-tile: each waits for its turn
            # (named barrier 2 + wg, 256 threads: its own sync + the other's arrive), issues, waits for its WGMMAs
            # and only then hands the turn over, so that one promotes while the other's WGMMAs run. Meant to stop
            # both from promoting at once with the tensor cores idle; measured slower (ALTERNATE_WARPGROUPS).
            wg = cute.arch.make_warp_uniform(cute.arch.warp_idx()) // 4 - 1
            turns = (pipeline.NamedBarrier(barrier_id=2 + wg, num_threads=2 * self.threads_per_wg),
                     pipeline.NamedBarrier(barrier_id=3 - wg, num_threads=2 * self.threads_per_wg))
            if wg == 1:
                turns[1].arrive()  # warpgroup 0 goes first
        if cutlass.const_expr(self.pair_k_tiles):
            assert mma_m == 1, "k_pair promotes one 64-row atom per warpgroup"
            tmp2 = cute.make_rmem_tensor((acc.shape[0], 1, acc.shape[2]), Float32)
            factors2 = cute.make_rmem_tensor((n_rows * self.n_segs,), Float32)
            for k2 in range(k_tiles // 2):
                k = k_begin + 2 * k2
                tiled_mma, read, release = self.k_pair(
                    tiled_mma, ab_pipe, tCrA, tCrB, acc, (tmp, tmp2), read, release, (even, odd),
                    (factors, factors2), scale_args, (cutlass.min(k + 2, k_last), cutlass.min(k + 3, k_last)))
        else:
            for k2 in range(k_tiles // 2):
                k = k_begin + 2 * k2
                tiled_mma, read, release = self.k_tile(tiled_mma, ab_pipe, tCrA, tCrB, acc, tmp, read, release,
                                                       even, factors, scale_args, cutlass.min(k + 2, k_last), turns)
                tiled_mma, read, release = self.k_tile(tiled_mma, ab_pipe, tCrA, tCrB, acc, tmp, read, release,
                                                       odd, factors, scale_args, cutlass.min(k + 3, k_last), turns)
        for _ in range(k_tiles % 2):  # an odd count: the last K-tile's scales are in ``even``
            tiled_mma, read, release = self.k_tile(tiled_mma, ab_pipe, tCrA, tCrB, acc, tmp, read, release, even,
                                                   factors, scale_args, k_last, turns)
        if cutlass.const_expr(self.alternate_warpgroups):
            if wg == 0:
                turns[0].arrive_and_wait()  # warpgroup 1's last hand-over: every tile leaves the barriers even
        return read, release

    @cute.jit
    def k_pair(self, tiled_mma: cute.TiledMma, ab_pipe, tCrA: cute.Tensor, tCrB: cute.Tensor, acc: cute.Tensor,
               tmps, read, release, scales, factors, scale_args, reload_k):
        """Two K-tiles with the first one's promotion under the second one's WGMMAs: WGMMA K-tile k into tmps[0]
        and k + 1 into tmps[1] (two commit groups), wait for the first group only, promote it while the second
        runs, then wait for the second and promote it. Nothing is in flight when the loop iterates again: a
        temporary still being written across the loop's back edge made ptxas serialize every WGMMA (measured)."""
        if cutlass.const_expr(not self.sfa_tma):
            for h in cutlass.range_constexpr(2):
                self.take_products(scales[h], factors[h], scale_args, None)
                self.load_scales(scale_args, reload_k[h], scales[h])
        warpgroup.fence()
        for h in cutlass.range_constexpr(2):
            ab_pipe.consumer_wait(read)
            if cutlass.const_expr(self.sfa_tma):  # a_scale arrived with the stage
                self.take_products(scales[h], factors[h], scale_args, read.index)
                self.load_scales(scale_args, reload_k[h], scales[h])
            self.wgmma_k_tile(tiled_mma, tCrA, tCrB, tmps[h], read, 0)
            warpgroup.commit_group()
            read.advance()
        for h in cutlass.range_constexpr(2):
            warpgroup.wait_group(1 - h)
            ab_pipe.consumer_release(release)
            release.advance()
            self.promote(acc, tmps[h], factors[h], 0)
        return tiled_mma, read, release

    @cute.jit
    def k_tile(self, tiled_mma: cute.TiledMma, ab_pipe, tCrA: cute.Tensor, tCrB: cute.Tensor, acc: cute.Tensor,
               tmp: cute.Tensor, read, release, scales: cute.Tensor, factors: cute.Tensor, scale_args, reload_k,
               turns=None):
        """One K-tile = one scale block: take the products of ``scales`` and start reloading them for K-tile
        ``reload_k`` (products first, so the reload writes the registers the loop carries: no register copy, which
        would wait for the load); then per 64-row WGMMA atom: WGMMA the K-tile into ``tmp`` (overwriting it), wait,
        promote into that atom's rows of ``acc``. The smem buffer is released after the last atom's WGMMAs.
        ``turns`` = (mine, other's) named barriers when the two warpgroups alternate (see ``mainloop``): wait for
        this warpgroup's turn before issuing, hand the turn over once its WGMMAs have completed.
        Returns the MMA atom and pipeline states it changed: the DSL carries loop state through assignments made
        in the loop body, not through mutations inside a call."""
        if cutlass.const_expr(not self.sfa_tma):
            self.take_products(scales, factors, scale_args, None)
            self.load_scales(scale_args, reload_k, scales)
        ab_pipe.consumer_wait(read)
        if cutlass.const_expr(self.sfa_tma):  # a_scale arrived with the stage; b_scale reloaded after the products
            self.take_products(scales, factors, scale_args, read.index)
            self.load_scales(scale_args, reload_k, scales)
        mma_m = cute.size(acc, mode=[1])
        for mm in cutlass.range_constexpr(mma_m):
            if cutlass.const_expr(turns is not None):
                turns[0].arrive_and_wait()
            warpgroup.fence()
            self.wgmma_k_tile(tiled_mma, tCrA, tCrB, tmp, read, mm)
            warpgroup.commit_group()
            if cutlass.const_expr(turns is not None and self.hand_over_at_issue):
                turns[1].arrive()
            warpgroup.wait_group(0)
            if cutlass.const_expr(turns is not None and not self.hand_over_at_issue):
                turns[1].arrive()
            if cutlass.const_expr(mm == mma_m - 1):
                ab_pipe.consumer_release(release)
            self.promote(acc, tmp, factors, mm)
        read.advance()
        release.advance()
        return tiled_mma, read, release

    @cute.jit
    def wgmma_k_tile(self, tiled_mma: cute.TiledMma, tCrA: cute.Tensor, tCrB: cute.Tensor, tmp: cute.Tensor, read,
                     mm):
        """Issue the WGMMAs of one K-tile (its k-blocks) for 64-row atom ``mm`` into ``tmp``, overwriting it: the
        first k-block with ACCUMULATE off (a static per-k-block flag: the k-blocks are unrolled at trace time)."""
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
            a_atom = tCrA[(None, mm, kb, read.index)]
            a_atom = cute.make_tensor(a_atom.iterator, cute.append(a_atom.layout, cute.make_layout(1)))
            cute.gemm(tiled_mma, tmp, a_atom, tCrB[(None, None, kb, read.index)], tmp)

    @cute.jit
    def load_scales(self, scale_args, kk, dst: cute.Tensor):
        """dst <- K-tile ``kk``'s scales: slot r < n_rows a_scale of the thread's row r (not with sfa_tma: staged
        in shared memory instead), slot n_rows + s b_scale of column segment s."""
        sfa, sfb, row_blocks, col_blocks, batch, _, _ = scale_args
        n_rows = len(row_blocks)
        if cutlass.const_expr(not self.sfa_tma):
            for r in cutlass.range_constexpr(n_rows):
                dst[r] = sfa[(row_blocks[r], kk, batch[0])]
        for sg in cutlass.range_constexpr(len(col_blocks)):
            dst[n_rows + sg] = sfb[(col_blocks[sg], kk, batch[1])]

    @cute.jit
    def take_products(self, scales: cute.Tensor, factors: cute.Tensor, scale_args, stage):
        """factors[r, s] = a_scale(row r) * b_scale(segment s): a_scale from ``scales`` or, with sfa_tma, from the
        stage's staged column in shared memory."""
        _, _, row_blocks, _, _, local_rows, s_sfa = scale_args
        n_rows = len(row_blocks)
        for r in cutlass.range_constexpr(n_rows):
            a = scales[r]
            if cutlass.const_expr(self.sfa_tma):
                a = s_sfa[(local_rows[r], 0, stage)]
            for sg in cutlass.range_constexpr(self.n_segs):
                factors[r * self.n_segs + sg] = a * scales[n_rows + sg]

    @cute.jit
    def promote(self, acc: cute.Tensor, tmp: cute.Tensor, factors: cute.Tensor, mm):
        """acc[atom mm] += tmp * factor[row, column slot], with ``factors`` = a_scale * b_scale of each (row the
        thread owns - one slot when ``rows_uniform`` - , column segment of the tile or, ``per_column``, column the
        thread owns)."""
        rows_per_atom = cute.size(acc.shape[0][1])
        # WGMMA's accumulator fragment: sub-mode 2 of mode 0 steps 8 columns (a thread holds 2 adjacent columns of
        # each 8-column group); one MMA along N covers the whole tile (tiler (64, tile_n)).
        assert cute.size(acc, mode=[2]) == 1
        for j in cutlass.range_constexpr(rows_per_atom):
            row = 0 if self.rows_uniform else (mm * rows_per_atom + j) * self.n_segs
            for c in cutlass.range_constexpr(cute.size(acc.shape[0][2])):
                for i in cutlass.range_constexpr(cute.size(acc.shape[0][0])):
                    s = factors[row + (2 * c + i if self.per_column else c * 8 // self.seg_n)]
                    acc[((i, j, c), mm, 0)] = acc[((i, j, c), mm, 0)] + tmp[((i, j, c), 0, 0)] * s
