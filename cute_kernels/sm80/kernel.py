"""Int8ScaledMmSm80: out = epilogue(A @ B) for int8 A, B with int32 accumulation, on sm_80-class GPUs.

What it computes (per batch l):
    acc[m, n] = sum_k A[l, m, k] * B[l, k, n]              (int8 x int8 -> int32, exact)
    out[l, m, n] = cast(tree.visit(acc, coords, operands))  (fp16 / bf16)
where ``tree`` is an epilogue visitor tree (the int8 scaled_mm tree is acc * b_scale[n] * a_scale[m] + bias[n]).

Layouts (torch view, what the host passes):
    a   int8 (L, M, K), K contiguous           -> CuTe (M, K, L)
    b   int8 (L, K, N), K contiguous (col-major, b = w.t() of a row-major [N, K] weight) -> CuTe (N, K, L)
    out fp16/bf16 (L, M, N), N contiguous      -> CuTe (M, N, L)
M, N, K, L and the strides are dynamic; K % 16 == 0 and N % 8 == 0 (16-byte cp.async / stores), 16-byte aligned
bases. Tails in M, N and K are exact: out-of-bounds rows are never loaded (their smem stays zero) and the ragged K
tile is the *first* k-tile of the CTA (the k range is shifted by K - k_tiles*tile_k), so only the prologue's first
load predicates on K.

Pipeline (one CTA = warps_m x warps_n warps, no warp specialization):
    gmem --cp.async 16 B (multistage ring of `stages` smem buffers, stages-1 loads in flight)--> smem (swizzled,
    K-major) --ldmatrix.x4 (register double buffer over the k-blocks of a tile)--> regs --mma.sync m16n8k32 s8.s8.s32
    --> int32 accumulators --epilogue tree (f32) --> fp16/bf16 fragment --> smem (reusing the A/B ring) --> 16-byte
    predicated stores.

Split-K (``split_k=True`` builds): grid.z = L * S; slice s of a tile runs k-tiles [s*kps, (s+1)*kps). Every slice
red.add's its int32 accumulators into the tile's slot of a zero-initialised workspace (integer adds commute, so the
sum is exact and deterministic); after a CTA barrier one thread bumps the tile's arrival counter (acq_rel atomic:
the only GPU-scope fence on the path); the slice that arrives last reads the
sum back with atomic exchanges that also reset the slot to zero, resets the counter, and runs the epilogue. The
workspace therefore stays all-zero between calls and is never cleared by the host.
"""

from __future__ import annotations

import math
from typing import Type

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync, warp

from cute_kernels.epilogues import EpilogueContext
from cute_kernels.sm80.configs import Sm80TileConfig
from cute_kernels.sm80.mma_int8 import MMA_SHAPE_MNK, MmaInt8Op

_COPY_BITS = 128


def _elem_ptr(t: cute.Tensor, coord):
    return t.iterator + cute.crd2idx(coord, t.layout)


class Int8ScaledMmSm80:
    """One compiled variant: a tile config, an output dtype, an epilogue tree, split-K on or off.

    The epilogue's gmem operands arrive as one tuple in ``tree.operand_names`` order.
    """

    def __init__(self, config: Sm80TileConfig, out_dtype: Type[cutlass.Numeric], epilogue_tree,
                 split_k: bool = False):
        config.validate("sm_80")
        self.cfg = config
        self.out_dtype = out_dtype
        self.tree = epilogue_tree
        self.split_k = split_k
        self.tile_mnk = (config.tile_m, config.tile_n, config.tile_k)
        self.num_threads = config.num_threads

    # ------------------------------------------------------------------------------------------------ host side
    @cute.jit
    def __call__(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        epilogue_args: tuple,
        workspace: cute.Tensor,
        tile_counters: cute.Tensor,
        split_k: cutlass.Int32,
        k_tiles_per_split: cutlass.Int32,
        stream,
    ):
        """mA (M, K, L), mB (N, K, L), mC (M, N, L) - K-major A/B, N-major C; workspace/counters None unless split-K."""
        bM, bN, bK = self.tile_mnk
        stages = self.cfg.stages

        sA_layout, sA_swizzle = self._smem_layout_ab(bM, bK, stages)
        sB_layout, sB_swizzle = self._smem_layout_ab(bN, bK, stages)
        sC_layout, sC_swizzle = self._smem_layout_c(bM, bN)

        g2s_atom = cute.make_copy_atom(
            cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), cutlass.Int8, num_bits_per_copy=_COPY_BITS
        )
        tiled_copy_A = self._k_major_tiled_copy(g2s_atom, bK)
        tiled_copy_B = self._k_major_tiled_copy(g2s_atom, bK)
        out_atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.out_dtype, num_bits_per_copy=_COPY_BITS)
        out_vec = _COPY_BITS // self.out_dtype.width
        out_thr = cute.make_layout((self.num_threads // (bN // out_vec), bN // out_vec), stride=(bN // out_vec, 1))
        tiled_copy_C = cute.make_tiled_copy_tv(out_atom, out_thr, cute.make_layout((1, out_vec)))

        # Each warp's N extent is doubled (16) so that one ldmatrix.x4 of B feeds two n8 MMA atoms.
        wm, wn = self.cfg.warps_m, self.cfg.warps_n
        tiled_mma = cute.make_tiled_mma(
            MmaInt8Op(),
            cute.make_layout((wm, wn, 1)),
            permutation_mnk=(wm * MMA_SHAPE_MNK[0], wn * MMA_SHAPE_MNK[1] * 2, MMA_SHAPE_MNK[2]),
        )

        tiles = cute.ceil_div(mC.shape, (bM, bN, 1))
        # Rasterize groups of `raster` N-tiles together so concurrently running CTAs share A and B tiles in L2.
        raster = 1
        if tiles[1] > 5:
            raster = 8
        elif tiles[1] > 2:
            raster = 4
        elif tiles[1] > 1:
            raster = 2
        grid = (
            cute.size(tiles[0]) * raster,
            (cute.size(tiles[1]) + raster - 1) // raster,
            cute.size(tiles[2]) * split_k,
        )
        self.kernel(
            mA, mB, mC, epilogue_args, workspace, tile_counters, split_k, k_tiles_per_split,
            sA_layout, sA_swizzle, sB_layout, sB_swizzle, sC_layout, sC_swizzle,
            tiled_copy_A, tiled_copy_B, tiled_copy_C, tiled_mma, raster,
        ).launch(grid=grid, block=[self.num_threads, 1, 1], stream=stream)

    # ---------------------------------------------------------------------------------------------- device side
    @cute.kernel
    def kernel(
        self,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        epilogue_args: tuple,
        workspace: cute.Tensor,
        tile_counters: cute.Tensor,
        split_k: cutlass.Int32,
        k_tiles_per_split: cutlass.Int32,
        sA_layout: cute.Layout,
        sA_swizzle: cute.Swizzle,
        sB_layout: cute.Layout,
        sB_swizzle: cute.Swizzle,
        sC_layout: cute.Layout,
        sC_swizzle: cute.Swizzle,
        tiled_copy_A: cute.TiledCopy,
        tiled_copy_B: cute.TiledCopy,
        tiled_copy_C: cute.TiledCopy,
        tiled_mma: cute.TiledMma,
        raster: cutlass.Int32,
    ):
        bM, bN, bK = self.tile_mnk
        tidx, _, _ = cute.arch.thread_idx()
        bidx, bidy, bidz = cute.arch.block_idx()
        tiles = cute.ceil_div(mC.shape, (bM, bN, 1))
        tile_m = bidx // raster
        tile_n = (bidx % raster) + bidy * raster
        batch = bidz
        split = cutlass.Int32(0)
        if cutlass.const_expr(self.split_k):
            batch = bidz // split_k
            split = bidz % split_k
        M, N = mC.shape[0], mC.shape[1]

        if tile_m < tiles[0] and tile_n < tiles[1]:
            tile_coord = (tile_m, tile_n, None)
            gA = cute.local_tile(mA[None, None, batch], self.tile_mnk, tile_coord, proj=(1, None, 1))
            gB = cute.local_tile(mB[None, None, batch], self.tile_mnk, tile_coord, proj=(None, 1, 1))
            gC = cute.local_tile(mC[None, None, batch], self.tile_mnk, tile_coord, proj=(1, 1, None))
            cA = cute.local_tile(cute.make_identity_tensor(mA.layout.shape)[None, None, batch], self.tile_mnk,
                                 tile_coord, proj=(1, None, 1))
            cB = cute.local_tile(cute.make_identity_tensor(mB.layout.shape)[None, None, batch], self.tile_mnk,
                                 tile_coord, proj=(None, 1, 1))
            cC = cute.local_tile(cute.make_identity_tensor((M, N)), (bM, bN), (tile_m, tile_n))

            # Make the ragged k-tile the first one: shift the k range by residual_k (<= 0); elements whose shifted
            # k coordinate is negative are never loaded.
            k_tiles_total = cute.size(gA, mode=[2])
            residual_k = cute.size(mA, mode=[1]) - cutlass.Int32(bK) * k_tiles_total
            gA = cute.domain_offset((0, residual_k, 0), gA)
            gB = cute.domain_offset((0, residual_k, 0), gB)
            gA = cute.make_tensor(gA.iterator.align(16), gA.layout)
            gB = cute.make_tensor(gB.iterator.align(16), gB.layout)
            cA = cute.domain_offset((0, residual_k, 0), cA)
            cB = cute.domain_offset((0, residual_k, 0), cB)

            k_tile_begin = split * k_tiles_per_split
            k_tile_count = cutlass.min(k_tiles_per_split, k_tiles_total - k_tile_begin)
            if cutlass.const_expr(not self.split_k):
                k_tile_begin = cutlass.Int32(0)
                k_tile_count = k_tiles_total

            # ---- shared memory: the A/B ring, reused by the output tile after the mainloop
            @cute.struct
            class SharedStorageAB:
                a: cute.struct.Align[cute.struct.MemRange[cutlass.Int8, cute.cosize(sA_layout)], 128]
                b: cute.struct.Align[cute.struct.MemRange[cutlass.Int8, cute.cosize(sB_layout)], 128]

            @cute.struct
            class SharedStorageC:
                c: cute.struct.Align[cute.struct.MemRange[self.out_dtype, cute.cosize(sC_layout)], 128]

            smem = cutlass.memory.SmemAllocator()
            storage = smem.allocate(
                max(SharedStorageAB.size_in_bytes(), SharedStorageC.size_in_bytes()), byte_alignment=128
            )
            sA = SharedStorageAB(storage).a.get_tensor(sA_layout, swizzle=sA_swizzle)
            sB = SharedStorageAB(storage).b.get_tensor(sB_layout, swizzle=sB_swizzle)
            sC = SharedStorageC(storage).c.get_tensor(sC_layout, swizzle=sC_swizzle)

            # ---- gmem -> smem partitions and M/N predicates (per 16-byte chunk row; K is handled by the shift)
            thr_copy_A = tiled_copy_A.get_slice(tidx)
            thr_copy_B = tiled_copy_B.get_slice(tidx)
            tAgA = thr_copy_A.partition_S(gA)
            tAsA = thr_copy_A.partition_D(sA)
            tAcA = thr_copy_A.partition_S(cA)
            tBgB = thr_copy_B.partition_S(gB)
            tBsB = thr_copy_B.partition_D(sB)
            tBcB = thr_copy_B.partition_S(cB)
            tApA = self._row_predicate(tAsA, tAcA, mA.shape[0])
            tBpB = self._row_predicate(tBsB, tBcB, mB.shape[0])

            # ---- prologue: zero the ring (tail rows are never written again), then stages-1 loads in flight
            tAsA.fill(0)
            tBsB.fill(0)
            cute.arch.sync_threads()
            num_stages = cute.size(tAsA, mode=[3])
            k_tile_index = k_tile_begin
            # Only the first k-tile can be ragged in K: predicate its chunks on k >= 0.
            for k in cutlass.range_constexpr(cute.size(tAsA, mode=[2])):
                if cute.elem_less(cutlass.Int32(-1), tAcA[0, 0, k, k_tile_index][1]):
                    cute.copy(tiled_copy_A, tAgA[None, None, k, k_tile_index], tAsA[None, None, k, 0],
                              pred=tApA[None, None, k])
            for k in cutlass.range_constexpr(cute.size(tBsB, mode=[2])):
                if cute.elem_less(cutlass.Int32(-1), tBcB[0, 0, k, k_tile_index][1]):
                    cute.copy(tiled_copy_B, tBgB[None, None, k, k_tile_index], tBsB[None, None, k, 0],
                              pred=tBpB[None, None, k])
            k_tile_index = k_tile_index + 1
            cute.arch.cp_async_commit_group()
            for k_tile in cutlass.range_constexpr(1, num_stages - 1):
                if k_tile == k_tile_count:
                    tApA.fill(0)
                    tBpB.fill(0)
                cute.copy(tiled_copy_A, tAgA[None, None, None, k_tile_index], tAsA[None, None, None, k_tile],
                          pred=tApA)
                cute.copy(tiled_copy_B, tBgB[None, None, None, k_tile_index], tBsB[None, None, None, k_tile],
                          pred=tBpB)
                k_tile_index = k_tile_index + 1
                cute.arch.cp_async_commit_group()

            # ---- MMA partitions, ldmatrix retiling
            thr_mma = tiled_mma.get_slice(tidx)
            tCsA = thr_mma.partition_A(sA)
            tCsB = thr_mma.partition_B(sB)
            tCrA = tiled_mma.make_fragment_A(tCsA[None, None, None, 0])
            tCrB = tiled_mma.make_fragment_B(tCsB[None, None, None, 0])
            tCrC = tiled_mma.make_fragment_C(thr_mma.partition_C(gC))
            tCrC.fill(0)

            ldmatrix = cute.make_copy_atom(warp.LdMatrix8x16x8bOp(False, 4), cutlass.Int8)
            tiled_s2r_A = cute.make_tiled_copy_A(ldmatrix, tiled_mma)
            tiled_s2r_B = cute.make_tiled_copy_B(ldmatrix, tiled_mma)
            thr_s2r_A = tiled_s2r_A.get_slice(tidx)
            thr_s2r_B = tiled_s2r_B.get_slice(tidx)
            tXsA = thr_s2r_A.partition_S(sA)
            tXrA = thr_s2r_A.retile(tCrA)
            tXsB = thr_s2r_B.partition_S(sB)
            tXrB = thr_s2r_B.retile(tCrB)

            smem_read = 0
            smem_write = num_stages - 1
            tXsA_p = tXsA[None, None, None, smem_read]
            tXsB_p = tXsB[None, None, None, smem_read]
            num_k_blocks = cute.size(tCrA, mode=[2])
            if cutlass.const_expr(num_k_blocks > 1):
                cute.arch.cp_async_wait_group(num_stages - 2)
                cute.arch.sync_threads()
                cute.copy(tiled_s2r_A, tXsA_p[None, None, 0], tXrA[None, None, 0])
                cute.copy(tiled_s2r_B, tXsB_p[None, None, 0], tXrB[None, None, 0])

            # ---- mainloop: smem ring (load tile t+stages-1 while computing t) x register double buffer (k-blocks)
            for k_tile in range(k_tile_count):
                for k_block in cutlass.range(num_k_blocks, unroll_full=True):
                    if k_block == num_k_blocks - 1:
                        tXsA_p = tXsA[None, None, None, smem_read]
                        tXsB_p = tXsB[None, None, None, smem_read]
                        cute.arch.cp_async_wait_group(num_stages - 2)
                        cute.arch.sync_threads()
                    k_block_next = (k_block + 1) % num_k_blocks
                    cute.copy(tiled_s2r_A, tXsA_p[None, None, k_block_next], tXrA[None, None, k_block_next])
                    cute.copy(tiled_s2r_B, tXsB_p[None, None, k_block_next], tXrB[None, None, k_block_next])
                    if k_block == 0:
                        if k_tile + num_stages - 1 < k_tile_count:
                            cute.copy(tiled_copy_A, tAgA[None, None, None, k_tile_index],
                                      tAsA[None, None, None, smem_write], pred=tApA)
                            cute.copy(tiled_copy_B, tBgB[None, None, None, k_tile_index],
                                      tBsB[None, None, None, smem_write], pred=tBpB)
                        k_tile_index = k_tile_index + 1
                        cute.arch.cp_async_commit_group()
                        smem_write = smem_read
                        smem_read = smem_read + 1
                        if smem_read == num_stages:
                            smem_read = 0
                    cute.gemm(tiled_mma, tCrC, tCrA[None, None, k_block], tCrB[None, None, k_block], tCrC)

            cute.arch.cp_async_wait_group(0)
            cute.arch.sync_threads()

            # ---- split-K: fold the slices' partial sums; only the last-arriving slice continues
            is_last = True
            if cutlass.const_expr(self.split_k):
                is_last = self._split_k_fold(tCrC, thr_mma, workspace, tile_counters, split_k, batch, tile_m,
                                             tile_n, tiles, sC, tidx)

            if is_last:
                # ---- epilogue: tree over (acc, coords) in registers -> out dtype -> smem -> 16-byte stores
                tCcC = thr_mma.partition_C(cC)
                ctx = EpilogueContext(acc=tCrC, coord=lambda i: tCcC[i], tensors=dict(zip(self.tree.operand_names, epilogue_args)))
                tCrD = cute.make_fragment_like(tCrC, self.out_dtype)
                tCrD.store(self.tree.visit(ctx).to(self.out_dtype))
                cute.autovec_copy(tCrD, thr_mma.partition_C(sC))
                cute.arch.sync_threads()

                thr_copy_C = tiled_copy_C.get_slice(tidx)
                tDsC = thr_copy_C.partition_S(sC)
                tDgC = thr_copy_C.partition_D(gC)
                tDcC = thr_copy_C.partition_S(cC)
                tDrC = cute.make_fragment_like(tDsC)
                cute.autovec_copy(tDsC, tDrC)
                for i in cutlass.range_constexpr(cute.size(tDgC, mode=[1])):
                    for j in cutlass.range_constexpr(cute.size(tDgC, mode=[2])):
                        # N % 8 == 0, so a 16-byte chunk is entirely inside or outside the output.
                        if cute.elem_less(tDcC[0, i, j], (M, N)):
                            cute.copy(tiled_copy_C, tDrC[None, i, j], tDgC[None, i, j])
        return

    @cute.jit
    def _split_k_fold(self, tCrC, thr_mma, workspace, tile_counters, split_k, batch, tile_m, tile_n, tiles, sC, tidx):
        """red.add this slice's accumulators into the tile's workspace slot; return whether this slice is the last.

        The last slice's accumulators become the full sum (read back with atomic exchange, which also re-zeroes the
        slot) and the tile's counter is reset, so the workspace is all-zero again when the kernel ends.
        """
        bM, bN, _ = self.tile_mnk
        tile_id = (batch * tiles[0] + tile_m) * tiles[1] + tile_n
        gW = cute.make_tensor(workspace.iterator + tile_id * (bM * bN), cute.make_layout((bM, bN), stride=(bN, 1)))
        tCgW = thr_mma.partition_C(gW)
        for i in cutlass.range(cute.size(tCrC), unroll_full=True):
            cute.arch.red(_elem_ptr(tCgW, i), tCrC[i], op="add", dtype="s32", sem="relaxed", scope="gpu")
        # Thread 0's acq_rel atomic publishes the CTA's adds (the barrier orders them before it; release is
        # cumulative) and acquires the other slices' (the barrier below orders every thread's reads after it): one
        # GPU-scope MEMBAR on this path instead of a fence per thread on each side (see Sm90GemmKernel.split_k_fixup).
        cute.arch.sync_threads()
        # sC is free until the epilogue; its first element carries the arrival index to every thread.
        flag = cute.make_tensor(cute.recast_ptr(sC.iterator, dtype=cutlass.Int32), cute.make_layout(1))
        if tidx == 0:
            flag[0] = cute.arch.atomic_add(_elem_ptr(tile_counters, tile_id), cutlass.Int32(1), sem="acq_rel",
                                           scope="gpu")
        cute.arch.sync_threads()
        is_last = flag[0] == split_k - 1
        cute.arch.sync_threads()  # every thread has read the flag before the epilogue overwrites sC
        if is_last:
            for i in cutlass.range(cute.size(tCrC), unroll_full=True):
                tCrC[i] = cute.arch.atomic_exch(_elem_ptr(tCgW, i), cutlass.Int32(0), sem="relaxed", scope="gpu")
            if tidx == 0:
                tile_counters[tile_id] = cutlass.Int32(0)
        return is_last

    # ------------------------------------------------------------------------------------------------- helpers
    # Smem swizzles are on byte addresses: keep 16-byte chunks whole (base 4) and XOR the chunk index (up to 3 bits)
    # with address bits 7-9, i.e. with the row index of 128-byte rows (with 64-byte rows, with row bits 1-2 while
    # row bit 0 already alternates the two 64-byte halves of a 128-byte bank line). Then the 8 rows that one
    # ldmatrix (or one STS phase of the output tile) touches at a fixed logical chunk land in 8 distinct 16-byte bank
    # groups: conflict-free. (A shift of 4, the usual element-count rule applied to 8-bit types, leaves 2-way conflicts.)
    _SWIZZLE_BASE, _SWIZZLE_SHIFT = 4, 3

    def _byte_swizzle(self, row_bytes: int):
        return cute.make_swizzle(min(int(math.log2(row_bytes // 16)), 3), self._SWIZZLE_BASE, self._SWIZZLE_SHIFT)

    def _smem_layout_ab(self, rows: int, bK: int, stages: int):
        """K-major (rows, bK, stages) int8 layout in 8-row atoms of up to 128 bytes, swizzled for ldmatrix."""
        atom_k = min(bK, 128)
        atom = cute.make_layout((8, atom_k), stride=(atom_k, 1))
        return cute.tile_to_shape(atom, (rows, bK, stages), (0, 1, 2)), self._byte_swizzle(atom_k)

    def _smem_layout_c(self, bM: int, bN: int):
        """Row-major (bM, bN) output tile in 8 x 128-byte atoms, swizzled like A/B for the MMA-layout stores."""
        atom_n = min(bN, 1024 // self.out_dtype.width)
        atom = cute.make_layout((8, atom_n), stride=(atom_n, 1))
        return cute.tile_to_shape(atom, (bM, bN), (0, 1)), self._byte_swizzle(atom_n * self.out_dtype.width // 8)

    def _k_major_tiled_copy(self, atom, bK: int):
        per_row = bK * 8 // _COPY_BITS
        thr = cute.make_layout((self.num_threads // per_row, per_row), stride=(per_row, 1))
        return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, _COPY_BITS // 8)))

    @cute.jit
    def _row_predicate(self, tXsX: cute.Tensor, tXcX: cute.Tensor, rows):
        """Boolean per (chunk, row-iteration) of a copy partition: is the chunk's row inside the operand."""
        pred = cute.make_rmem_tensor(
            cute.make_layout(
                (tXsX.shape[0][1], cute.size(tXsX, mode=[1]), cute.size(tXsX, mode=[2])),
                stride=(cute.size(tXsX, mode=[1]), 1, 0),
            ),
            cutlass.Boolean,
        )
        for v in cutlass.range_constexpr(pred.shape[0]):
            for r in cutlass.range_constexpr(pred.shape[1]):
                pred[v, r, 0] = cute.elem_less(tXcX[(0, v), r, 0, 0][0], rows)
        return pred
