"""FP8 (e4m3) GEMM with blockwise / groupwise scale factors on SM90: the warp-specialized GEMM of ``gemm.py`` with a
two-level-accumulation mainloop.

Computes, for every batch l:
    D[m, n, l] = epilogue( sum_kb SFA[m // gM, kb, l] * SFB[n // gN, kb, l] * sum_{k in K-block kb} A[m, k, l] * B[n, k, l] )
  A: (M, K, L) and B: (N, K, L) float8_e4m3fn, K-major (as every 8-bit WGMMA operand); D: (M, N, L) fp16/bf16.
  SFA: (ceil(M/gM), K/gK, L) and SFB: (ceil(N/gN), K/gK, L) float32, any strides (read element by element).
  Granularity: gK = 128 = the K-tile, gN a multiple of the CTA tile's N (so one SFB value per tile and K-tile),
  gM any positive int (1 = per-token "groupwise", 128 = "blockwise").

Everything but the mainloop is the base kernel: producer warp streaming A/B K-tiles with TMA into the smem ring,
persistent static tile schedule, epilogue tree -> stmatrix -> TMA store.

Mainloop (per consumer warpgroup, per K-tile = one scale block):
  1. read this K-block's scales from global memory into registers: one SFB value for the tile and one SFA value for
     each of the thread's accumulator rows (2 rows per 64-row WGMMA atom). The loads are issued before the WGMMA
     wait so their latency hides behind the tensor-core work; the scales are tiny and stay in L1/L2.
  2. WGMMA the K-tile's four k-blocks into a temporary fp32 accumulator, the first with ACCUMULATE off (a static
     per-k-block flag: the four k-blocks are unrolled at trace time, so each WGMMA gets its own flag).
  3. wait for it, release the smem buffer to the producer, and promote: acc += tmp * (sfa_row * sfb).
This promotion is also what keeps FP8 precise: Hopper's FP8 WGMMA accumulates with a reduced-precision adder, so
each 128-deep partial sum goes into a true fp32 accumulator (DSL_PRIMER §11). While one consumer warpgroup
promotes, the other one's WGMMAs keep the tensor cores busy.

Registers: acc + tmp are 2 x (tile_n / 2) fp32 per thread, so tile_n <= 128 (128x256 would spill).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32
from cutlass.cute.nvgpu import warpgroup

from ..configs import TileConfig
from ..epilogues import EpilogueTree
from .gemm import Sm90GemmKernel


class Fp8BlockwiseGemmSm90(Sm90GemmKernel):
    """One compiled variant = (TileConfig, epilogue tree, (gM, gN, gK), D dtype, SM count)."""

    mainloop_operand_names = ("sfa", "sfb")

    def __init__(self, config: TileConfig, epilogue: EpilogueTree, granularity: tuple[int, int, int],
                 sm_count: int = 132):
        g_m, g_n, g_k = granularity
        if g_k != 128:
            raise ValueError(f"scale granularity along K must be 128 (the K-tile of an FP8 WGMMA tile); got {g_k}")
        if config.tile_n > 128 or g_n % config.tile_n:
            raise ValueError(f"tile_n={config.tile_n} must be <= 128 and divide the N granularity {g_n}")
        if config.swap_ab:
            raise ValueError("Fp8BlockwiseGemmSm90 does not support swap_ab")
        super().__init__(config, epilogue, Float32, sm_count=sm_count)
        self.g_m, self.g_n, self.g_k = g_m, g_n, g_k

    @cute.jit
    def mainloop(self, tiled_mma: cute.TiledMma, ab_pipe, tCrA: cute.Tensor, tCrB: cute.Tensor, acc: cute.Tensor,
                 read, release, k_tiles, tile, tCcD: cute.Tensor, tensors: dict):
        sfa, sfb = tensors["sfa"], tensors["sfb"]  # (ceil(M/gM), KB, L), (ceil(N/gN), KB, L)
        k_blocks = cute.size(tCrA, mode=[2])
        tmp = cute.make_rmem_tensor(acc.layout, Float32)
        # acc is ((2, 2, tile_n / 8), MMA_M, MMA_N): mode 0's middle sub-mode steps 8 rows; everything else is
        # columns or whole 64-row atoms, so a thread owns 2 x MMA_M distinct rows.
        rows_per_atom = cute.size(acc.shape[0][1])
        mma_m = cute.size(acc, mode=[1])
        row_blocks = []
        last_row_block = cute.size(sfa, mode=[0]) - 1  # rows past M (ragged tiles) reuse the last scale
        for mm in cutlass.range_constexpr(mma_m):
            for j in cutlass.range_constexpr(rows_per_atom):
                row = tCcD[((0, j, 0), mm, 0)][0]
                row_blocks.append(cutlass.min(row // self.g_m, last_row_block))
        col_block = cutlass.min(tile[1] * self.config.tile_n // self.g_n, cute.size(sfb, mode=[0]) - 1)
        batch = tile[2]

        read.reset_count()
        release.reset_count()
        acc.fill(0)
        for k in range(k_tiles):
            s_b = sfb[(col_block, k, batch)]
            s_rows = [sfa[(rb, k, batch)] * s_b for rb in row_blocks]
            ab_pipe.consumer_wait(read)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
                cute.gemm(tiled_mma, tmp, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)],
                          tmp)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            ab_pipe.consumer_release(read)
            read.advance()
            release.advance()
            for mm in cutlass.range_constexpr(mma_m):
                for j in cutlass.range_constexpr(rows_per_atom):
                    s = s_rows[mm * rows_per_atom + j]
                    for i in cutlass.range_constexpr(cute.size(acc.shape[0][0])):
                        for c in cutlass.range_constexpr(cute.size(acc.shape[0][2])):
                            for nn in cutlass.range_constexpr(cute.size(acc, mode=[2])):
                                idx = ((i, j, c), mm, nn)
                                acc[idx] = acc[idx] + tmp[idx] * s
        return read, release
