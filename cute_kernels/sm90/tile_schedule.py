"""PersistentTileSchedule: the static order in which a persistent grid walks the work tiles of an SM90 GEMM.

What it computes
    The base kernel (``gemm.Sm90GemmKernel``) launches at most one cluster per free cluster slot and lets every CTA
    loop over work tiles: cluster c takes work indices c, c + G, c + 2G, ... (G = clusters launched). A work index
    is a cluster of output tiles, whose CTAs take the tiles of that cluster by their rank in it. The producer warp
    and the consumer warpgroups of a CTA walk the same sequence independently, so they agree on every tile without
    communicating.

Order (the inverse of a CuTe layout over (clusters along M, clusters along N, L), so ``get_flat_coord`` maps a work
index to cluster coordinates)
    * ``swizzle == 1``: along M first (``along_m``: M fastest, then N, then L) or along N first.
    * ``swizzle = S > 1``: bands of S clusters across the other dimension; the index runs across the band first,
      then along the band's length, then to the next band (``configs.raster_for``: consecutive waves then share
      operand panels in L2). The dimension across the band is rounded up to whole bands: work indices that land past
      the last real cluster are still walked and yield tiles past the output, which the kernel computes and does
      not store (the same as the cluster rounding of a ragged tile grid).

K-split walks (``split_args``): a split launch walks ``head`` whole positions first (work indices below ``head``,
all of K each), then the remaining ``tail`` positions, each cut into ``slices`` K slices, slice-major: work index
``head + s * tail + t`` is K slice ``s`` of position ``head + t``. ``head = 0`` is the plain split-K of a problem
whose tiles alone leave SMs idle (every position split); ``head`` = whole waves of positions is the split of the
last, partial wave only (``ops.split_k.plan_split_k``): the GPU runs full waves of whole tiles, then the last wave's
tiles in ``slices`` pieces across all SMs instead of on a few of them. Slice-major, so the slices of a tail position
run on different CTAs at the same time.

Cluster split-K (``k_ranks`` > 1): the launch's cluster is ``k_ranks`` CTAs along x that all take the same output
tile, CTA rank r its K slice r (``Sm90GemmKernel.split_cluster``); the work indices are positions, as unsplit, and
the grid has one cluster per position (not persistent: see ``grid``).

Why our own: the DSL's ``cutlass.utils.StaticPersistentTileScheduler`` (the same static schedule) is deprecated in
nvidia-cutlass-dsl 4.8 ("the wheel copy will be removed") and warns on every compile. This is the part of it we use,
as plain functions of the loop index: the kernel's loops carry one Int32.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute


@dataclass(frozen=True)
class PersistentTileSchedule:
    """Compile-time shape of the schedule: the cluster (CTAs along M, N) and the raster (``swizzle``, ``along_m``).

    The host methods take ``tiles_mnl``, the output-tile counts (M tiles, N tiles, L), as trace-time values;
    the kernel gets ``device_args(tiles_mnl)`` and derives the same order from it."""

    cluster_mn: tuple[int, int] = (1, 1)
    swizzle: int = 1
    along_m: bool = True
    k_ranks: int = 1  # CTAs of a cluster that share one tile, each a K slice (cluster split-K)

    def __post_init__(self):
        if self.swizzle < 1:
            raise ValueError(f"PersistentTileSchedule.swizzle must be >= 1; got {self.swizzle}")
        if self.k_ranks > 1 and self.cluster_mn != (1, 1):
            raise ValueError(f"PersistentTileSchedule: k_ranks = {self.k_ranks} needs cluster_mn (1, 1); got "
                             f"{self.cluster_mn}")

    def cluster_counts(self, tiles_mnl):
        """(clusters along M, clusters along N): the tile grid rounded up to whole clusters."""
        return ((tiles_mnl[0] + self.cluster_mn[0] - 1) // self.cluster_mn[0],
                (tiles_mnl[1] + self.cluster_mn[1] - 1) // self.cluster_mn[1])

    def cluster_layout(self, tiles_mnl) -> cute.Layout:
        """Layout (clusters_m, clusters_n, L) -> work index; its inverse is the schedule."""
        cm, cn = self.cluster_counts(tiles_mnl)
        lc = tiles_mnl[2]
        s = self.swizzle
        if s == 1:
            if self.along_m:
                return cute.make_layout((cm, cn, lc), stride=(1, cm, cm * cn))
            return cute.make_layout((cm, cn, lc), stride=(cn, 1, cm * cn))
        if self.along_m:
            # bands of s clusters along N; inside a band the index runs across its s columns, then down M
            cn = (cn + s - 1) // s * s
            return cute.make_layout((cm, (s, cn // s), lc), stride=(s, (1, s * cm), cm * cn))
        cm = (cm + s - 1) // s * s
        return cute.make_layout(((s, cm // s), cn, lc), stride=((1, s * cn), s, cm * cn))

    def grid(self, tiles_mnl, max_active_clusters: int, split_args=None) -> list:
        """Launch grid (cluster_m, cluster_n, clusters): as many clusters as there is work, at most one per slot."""
        if self.k_ranks > 1:
            # One cluster per position, however many fit at once (the rest wait for a free SM pair): a cluster never
            # walks a second tile. Session 28's GPU test of such walks (4 two-CTA clusters over 18 tiles of 128 rows)
            # gave wrong results, the 64-row ones did not: a reused slot needs a cluster-scope free arrive
            # (``Sm90GemmKernel.cluster_reduce``, session 29), which costs a GPU-wide MEMBAR per tile. The ops launch
            # only one-wave plans anyway.
            return [self.k_ranks, 1, self.work_count((tiles_mnl,), split_args)]
        clusters = cutlass.min(self.work_count((tiles_mnl,), split_args), max_active_clusters)
        return [self.cluster_mn[0], self.cluster_mn[1], clusters]

    def device_args(self, tiles_mnl) -> tuple:
        """What the kernel takes at run time: the work-tile counts and, for the plain (unswizzled) order, fast
        divisors of the cluster counts along the fast and the slow dimension. The divisors are built on the host, so
        the device splits a work index with multiplies and shifts: a decode-size CTA walks one tile, and the integer
        divisions of the generic path would sit on its critical path (~400 more SASS instructions in the producer
        and consumer of a swap_ab split-K int8 kernel)."""
        if self.swizzle > 1:
            return (tiles_mnl,)
        cm, cn = self.cluster_counts(tiles_mnl)
        fast, slow = (cm, cn) if self.along_m else (cn, cm)
        return (tiles_mnl, cute.fast_divmod_create_divisor_v2(fast), cute.fast_divmod_create_divisor_v2(slow))

    @cute.jit
    def first_work(self):
        """This cluster's first work index (its index in the grid)."""
        return cutlass.Int32(cute.arch.block_idx()[2])

    @cute.jit
    def work_stride(self):
        """How far every cluster advances per tile: the number of clusters launched."""
        return cutlass.Int32(cute.arch.grid_dim()[2])

    def position_count(self, tiles_mnl) -> int:
        """Positions of the walk (cluster rounding and swizzle bands included), on Python integers: the host's count
        of what ``cluster_layout`` sizes on the device (``plan_split_k`` sizes the split scratch with it)."""
        cm, cn = self.cluster_counts(tiles_mnl)
        s = self.swizzle
        if s > 1:
            if self.along_m:
                cn = -(-cn // s) * s
            else:
                cm = -(-cm // s) * s
        return cm * cn * tiles_mnl[2]

    def split_args(self, tiles_mnl, slices, head) -> tuple:
        """Device arguments of a K-split walk (see the module docstring): (slices, head, tail positions, a fast
        divisor of the tail count). ``slices`` and ``head`` are run-time Int32 values of the launch; the host keeps
        the tail at one position or more."""
        tail = cute.size(self.cluster_layout(tiles_mnl)) - head
        return slices, head, tail, cute.fast_divmod_create_divisor_v2(tail)

    def work_count(self, args, split_args=None):
        """Work indices below this are real work (cluster rounding included); ``args`` from ``device_args``,
        ``split_args`` from ``split_args`` for a K-split walk."""
        if split_args is None:
            return cute.size(self.cluster_layout(args[0]))
        slices, head, tail, _ = split_args
        return head + tail * slices

    @cute.jit
    def split_unit(self, split_args, work):
        """(position, K slice, K slices of that position) of work index ``work``: (work, 0, 1) for an unsplit walk
        and for the head of a split one."""
        pos, s_idx, n_slices = work, 0, 1
        if cutlass.const_expr(split_args is not None):
            head = split_args[1]
            pos, s_idx, n_slices = work, cutlass.Int32(0), cutlass.Int32(1)
            if work >= head:
                pos, s_idx, n_slices = self.tail_unit(split_args, work)
        return pos, s_idx, n_slices

    @staticmethod
    def tail_unit(split_args, work):
        """``split_unit`` of a work index at or past the head: slice-major over the tail positions. Plain arithmetic
        (on Python ints too, with the tail count in place of its divisor: the CPU tests check it)."""
        slices, head, _tail, tail_div = split_args
        s_idx, t = divmod(work - head, tail_div)
        return head + t, s_idx, slices

    def cluster_coord(self, args, work):
        """Cluster coordinates (m, n, L) of position ``work``. Plain arithmetic on what ``device_args``
        gives (on Python ints too, with plain integers in place of the divisors: the CPU tests check the order)."""
        if self.swizzle == 1:
            rest, fast = divmod(work, args[1])
            lc, slow = divmod(rest, args[2])
            return (fast, slow, lc) if self.along_m else (slow, fast, lc)
        return self.cluster_layout(args[0]).get_flat_coord(work)

    @cute.jit
    def tile_of(self, args, pos):
        """(m tile, n tile, L index) of this CTA at position ``pos`` (``split_unit``'s first value)."""
        coord = self.cluster_coord(args, pos)
        bidx, bidy, _ = cute.arch.block_idx()
        if cutlass.const_expr(self.k_ranks > 1):
            bidx = 0  # the x extent is the cluster's K ranks, which all take this tile
        # the launch's x / y extents are the cluster's, so the block index there is the CTA's rank in its cluster
        return (cute.arch.make_warp_uniform(cutlass.Int32(coord[0]) * self.cluster_mn[0] + cutlass.Int32(bidx)),
                cute.arch.make_warp_uniform(cutlass.Int32(coord[1]) * self.cluster_mn[1] + cutlass.Int32(bidy)),
                cute.arch.make_warp_uniform(cutlass.Int32(coord[2])))
