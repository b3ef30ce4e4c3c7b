"""Warp-specialized persistent TMA + WGMMA GEMM for SM90 with an epilogue visitor tree.

Computes, for every batch l:   D[m, n, l] = epilogue(sum_k A[m, k, l] * B[n, k, l])
  A: (M, K, L) K-major, B: (N, K, L) K-major (8-bit WGMMA operands must be K-major), D: (M, N, L) N- or M-major.
  The accumulator is Int32 for int8 operands (exact), Float32 otherwise; the epilogue tree (cute_kernels.epilogues)
  turns it into D's dtype, reading its own operands (scales, bias) from global memory.

Roles (one CTA = 1 producer warpgroup + 2 consumer warpgroups, launched persistent, one CTA per SM - or
``TileConfig.ctas_per_sm`` of them, which split the SM's shared memory and registers):
  * warp 0 (producer, registers lowered to 40 with setmaxnreg): walks the same static tile schedule as the consumers
    and, for each tile, streams the K-tiles of A and B with TMA into a ring of ``stages`` shared-memory buffers. Each
    buffer has a full/empty mbarrier pair (cutlass.pipeline.PipelineTmaAsync); the full barrier expects the
    transaction bytes of one A tile + one B tile. With a cluster, A is multicast to the CTAs of a cluster row and B to
    those of a cluster column, so each CTA issues only its share of the loads.
  * warpgroups 1-2 (consumers, registers raised to 232): the tile's 128 rows are split 64/64 between them. Per K-tile:
    wait on the full barrier, issue the WGMMAs of the tile's k-blocks, commit, keep one K-tile of WGMMA in flight
    (wait_group(1)) and release the previous buffer to the producer. Then the epilogue: per epilogue sub-tile,
    the accumulator slice is passed with its coordinates through the epilogue tree, converted to D's dtype,
    written to shared memory with stmatrix, fenced for the async proxy, and stored by one warp with a TMA store
    (which clips at the tensor edge, so ragged M/N need no predication). TMA loads zero-fill past the edge, so
    a ragged K adds zeros. Along a ``clamp``ed dimension (the tokens) the last tile is moved back to end at the
    edge instead (``tile_shifts``): a box far past the edge is slower than real rows (session 22).
The schedule is ``tile_schedule.PersistentTileSchedule`` over (M tiles, N tiles, L), M-fastest or, on large
problems, swizzled (``raster``: ``configs.raster_for``, fewer operand panels per wave); all roles walk it in
lockstep, so they agree on the tile without communicating. With ``l2_warmup`` the producer warp first asks L2 for
the first K-tiles of its first tile (TMA prefetch), before the programmatic-dependent-launch wait, so the pipeline
fill overlaps the previous kernel's tail (``warm_l2``); with ``weight_preload`` it goes further for the weight operand
and TMAs its first K-tiles straight into the ring before that wait (``preload_weights``; the activations of those
stages follow after it).

Split-K (``split`` given to ``__call__``): the schedule walks whole tiles first and then the remaining tiles in K
slices (``PersistentTileSchedule.split_args``): every tile for decode-size problems whose few output tiles cannot
fill the GPU, only the last partial wave's tiles for multi-wave problems (``TileConfig.split_tail``). A slice covers
a contiguous range of K-tiles, and ``split_k_fixup`` makes the last slice of a tile to finish add the others'
partials and run the epilogue (see its docstring).
Masked batches (``masked_dim``, MoE experts' grouped GEMM in DeepGEMM's masked layout): batch l holds only
``masked_m[l]`` valid rows along the token dimension (an Int32 [L] operand, read on the device after the PDL wait,
so a CUDA graph replays with new counts). The work list then holds only the tiles that reach a valid row
(``masked_work_count`` / ``masked_tile_of``): batch by batch, each weight tile's token tiles next to each other
(they share its weight tile in L2). Every role derives the list from ``masked_m`` alone, so they still agree
without communicating. A tile that straddles a count computes and stores all its rows (the ones past the count hold
whatever the operand rows there give); the rows of tiles not in the list are not written.
Row groups (``row_groups``, MoE experts in DeepGEMM's contiguous layout): A and D hold every expert's rows one after
the other, each expert's run starting on a tile boundary, B holds one weight per expert (L = experts), and an Int32
operand ``m_indices`` [M] names each row's expert (negative: a padding row). The static schedule walks A / D's
tiles; a tile's weight is the expert of its first row (``tile_of``'s fourth entry, the batch index of B and of the
mainloop's weight operands). A tile whose first row has no valid expert loads nothing and runs no mainloop; its
accumulator is zero. The epilogue tree checks every row against its tile (``epilogues.RowGroupGuard``).
Diagnostics: ``__call__(timeline=T)`` makes every CTA write global-timer stamps (entry, PDL wait, first full stage,
mainloop end, consumer / producer end) into T; without it nothing is emitted (benchmarks/experiments/timeline.py).
Subclasses override ``mainloop`` (the FP8 blockwise kernel promotes per-K-block scaled partial sums there) and, for an
A operand that is not WGMMA's shared-memory operand, the A hooks (``make_tiled_mma``, ``a_stage_bytes``,
``make_smem_layout_a``, ``a_tma_tile``, ``make_fragment_a``): the weight-only kernel stages packed low-bit codes and
decodes them into a register-sourced WGMMA operand (weight_only_wgmma.py).
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait
from cutlass.tensor_utils import LayoutEnum

from ..configs import TileConfig
from ..epilogues import EpilogueContext, EpilogueTree
from .tile_schedule import PersistentTileSchedule

SM90_SMEM_BYTES = 232448  # 227 KB per CTA (cudaDevAttrMaxSharedMemoryPerBlockOptin on H100/H200)
SM90_SMEM_PER_SM = 233472  # 228 KB per SM, shared by its CTAs (each also costs 1 KB of driver reservation)
_MAX_STAGES = 10
# Slots of the diagnostic timeline (``Sm90GemmKernel.__call__(timeline=...)``): global-timer ns per CTA, and last the
# CTA's work units | SM id << 32.
TL_ENTRY, TL_WAITED, TL_FIRST_DATA, TL_MAINLOOP_END, TL_CONSUMER_END, TL_PRODUCER_END, TL_UNITS = range(7)
TIMELINE_SLOTS = 8


class Sm90GemmKernel:
    """One compiled variant = (operand dtypes, D dtype and majorness, TileConfig, EpilogueTree, SM count)."""

    producer_regs = 40
    consumer_regs = 232
    threads_per_wg = 128
    mainloop_operand_names: tuple[str, ...] = ()  # subclasses that read extra operands in ``mainloop`` name them
    # whether ``issue_mainloop_loads`` stages operands of the weight (loaded by ``preload_weights`` with it)
    mainloop_loads_static = False

    def __init__(self, config: TileConfig, epilogue: EpilogueTree, acc_dtype, sm_count: int = 132,
                 use_pdl: bool = True, l2_warmup: int = 0, raster: tuple[int, bool] = (1, True),
                 clamp: tuple[bool, bool] = (False, False), weight_preload: int = 0, weight_operand: int = 1,
                 split_cluster: int = 1, rank1_share: int = 8, masked_dim: int | None = None,
                 row_groups: bool = False):
        """l2_warmup: K-tiles of the CTA's first work tile whose A and B the producer asks L2 for (TMA prefetch)
        before ``griddepcontrol.wait``, i.e. while the previous kernel on the stream may still run (PDL); 0 = off.
        raster: (swizzle, raster_along_m) of the persistent schedule (``configs.raster_for``).
        clamp: (M, N): move the last tile of that dimension back so that it ends at the tensor's edge (``tile_shifts``);
        for the token dimension, whose TMA boxes past the end are slow. Only for epilogues that do not read what
        they write (no added ``c``, which may alias the output) and mainloops whose per-row / per-column operands
        follow the tile origin.
        weight_preload: K-tiles of the CTA's first work tile whose weight operand (``weight_operand``: 0 = A,
        1 = B) the producer loads into the shared-memory ring before ``griddepcontrol.wait`` (at most the ring);
        the other operand of those stages follows after the wait. Only for a weight that no kernel launching this
        one programmatically writes (``preload_weights``); 0 = off.
        split_cluster: S > 1 launches clusters of S CTAs that take the same output tile, CTA rank r K slice r; the
        ranks > 0 send their partial accumulators to rank 0's shared memory (``cluster_reduce``), which adds them
        in rank order and runs the epilogue. A split-K with no workspace and no semaphore, for 1x1-cluster configs
        launched without ``split``. The grid has one cluster per tile (``PersistentTileSchedule.grid``).
        rank1_share: with ``split_cluster`` = 2, the sixteenths of the tile's K-tiles rank 1 streams (8: halves);
        rank 0, which adds the partials and runs the epilogue, streams the rest (``slice_range``).
        masked_dim: 0 (M) or 1 (N) - the token dimension - for masked batches (module docstring): the launch's last
        operand is ``masked_m`` Int32 [L]. Needs a 1x1 cluster (the multicast peers' tiles come from one static
        schedule), no weight preload and no split-K; the L2 warm-up is off (its first tile is the static
        schedule's, before ``masked_m`` may be read).
        row_groups: the rows of A / D belong to the experts ``m_indices`` names (module docstring): the launch's
        last operand is ``m_indices`` Int32 [M] unless the epilogue tree already reads it. Needs clusters along N
        only, no split-K or weight preload, an unclamped M and a tile height that divides the experts' row
        alignment."""
        self.config = config
        self.clamp = tuple(bool(c) for c in clamp)
        # Rows a moved origin is rounded up to, per dimension: a TMA box's start in its tensor's innermost dimension
        # must be 16-byte aligned (an unaligned one is an illegal instruction), which matters for an operand whose
        # rows are that dimension (FP8's staged MN-major a_scale: 4 floats). The tile then ends up to align - 1 rows
        # past the edge.
        self.clamp_align = (1, 1)
        self.raster = raster
        if not 1 <= split_cluster <= 8:
            raise ValueError(f"split_cluster must be 1..8 (CTAs of a portable cluster); got {split_cluster}")
        if split_cluster > 1 and (config.cluster_m, config.cluster_n) != (1, 1):
            raise ValueError(f"split_cluster = {split_cluster} needs a 1x1 cluster config; got {config.describe()}")
        self.split_cluster = split_cluster
        if not 1 <= rank1_share <= 8 or (rank1_share != 8 and split_cluster != 2):
            raise ValueError(f"rank1_share must be 1..8 (sixteenths of K), and other than 8 only with split_cluster = 2;"
                             f" got {rank1_share} with split_cluster = {split_cluster}")
        self.rank1_share = rank1_share
        if masked_dim is not None:
            if masked_dim not in (0, 1):
                raise ValueError(f"masked_dim must be 0 (M), 1 (N) or None; got {masked_dim!r}")
            if (config.cluster_m, config.cluster_n) != (1, 1) or split_cluster > 1 or weight_preload:
                raise ValueError(f"masked batches need a 1x1 cluster, no cluster split-K and no weight preload; got "
                                 f"{config.describe()}, split_cluster={split_cluster}, weight_preload={weight_preload}")
            l2_warmup = 0  # it would warm the static schedule's first tile, not the work list's
        if row_groups:
            # (CTAs of a cluster along N share the tile's rows, so its expert: A may be multicast, B may not)
            if config.cluster_m != 1 or split_cluster > 1 or weight_preload or clamp[0] or masked_dim is not None:
                raise ValueError(f"row groups need clusters along N only (cluster_m = 1), no cluster split-K, no weight "
                                 f"preload, no clamped M and no masked batches; got {config.describe()}, split_cluster="
                                 f"{split_cluster}, weight_preload={weight_preload}, clamp={clamp}, masked_dim="
                                 f"{masked_dim}")
            l2_warmup = 0  # a tile's weight is only known once m_indices may be read (after the PDL wait)
        self.masked_dim = masked_dim
        self.row_groups = row_groups
        self.schedule = PersistentTileSchedule((config.cluster_m, config.cluster_n), *raster, k_ranks=split_cluster)
        self.use_pdl = use_pdl
        self.l2_warmup = l2_warmup if use_pdl else 0
        self.weight_preload = weight_preload if use_pdl else 0
        self.weight_operand = weight_operand
        if self.weight_preload and self.clamp[weight_operand]:
            raise ValueError("weight_preload: the weight operand's tiles must not be clamped (only the tokens' are)")
        self.epilogue = epilogue
        self.acc_dtype = acc_dtype
        self.cluster_shape_mn = (config.cluster_m, config.cluster_n)  # the operands' multicast cluster
        self.launch_cluster_mn = (split_cluster, 1) if split_cluster > 1 else self.cluster_shape_mn
        ctas_per_sm = config.ctas_per_sm
        # (a split_cluster grid has one cluster per tile instead: PersistentTileSchedule.grid)
        self.max_active_clusters = max(1, config.slots(sm_count) // (config.cluster_m * config.cluster_n))
        # Two consumer warpgroups split a 128-row tile; a 64-row tile has one.
        self.atom_layout_mnk = (2, 1, 1) if config.tile_m == 128 else (1, 1, 1)
        self.num_mma_wg = math.prod(self.atom_layout_mnk)
        if self.num_mma_wg == 1:
            # One consumer warpgroup next to the producer: the register file (64K) allows it the hardware maximum
            # (the 3-warpgroup split 40 + 2 x 232 is what two consumers can have).
            self.consumer_regs = 256
        self.num_threads = (1 + self.num_mma_wg) * self.threads_per_wg
        self.num_mma_threads = self.num_mma_wg * self.threads_per_wg
        self.smem_bytes = SM90_SMEM_BYTES
        if ctas_per_sm > 1:
            # Several CTAs per SM share its shared memory (each with the driver's 1 KB) and its 64K registers. The
            # launch gets 64K / (ctas x threads) registers per thread (ptxas: .minnctapersm); the producer drops to
            # the minimum and the consumers take what that frees from the CTA's share.
            self.smem_bytes = SM90_SMEM_PER_SM // ctas_per_sm - 1024
            launch_regs = 65536 // (ctas_per_sm * self.num_threads) // 8 * 8
            self.producer_regs = 24
            self.consumer_regs = min(256, (launch_regs * self.num_threads - self.producer_regs * self.threads_per_wg)
                                     // self.num_mma_threads // 8 * 8)
        self.epi_store_warp = 4  # first warp of the first consumer warpgroup
        self.epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=self.num_mma_threads)
        # Global operands the kernel reads besides A and B: the epilogue tree's, then those a subclass's mainloop
        # reads (e.g. FP8 block scales); the launch passes them as one tuple in this order.
        self.operand_names = epilogue.operand_names + self.mainloop_operand_names
        if masked_dim is not None:
            self.operand_names += ("masked_m",)
        if row_groups and "m_indices" not in self.operand_names:
            self.operand_names += ("m_indices",)

    # ------------------------------------------------------------------ host-side (trace-time) setup
    def _setup(self, a_dtype, b_dtype, d_dtype, a_layout, b_layout, d_layout):
        cfg = self.config
        self.a_dtype, self.b_dtype, self.d_dtype = a_dtype, b_dtype, d_dtype
        self.a_layout, self.b_layout, self.d_layout = a_layout, b_layout, d_layout
        self.tiled_mma = self.make_tiled_mma()
        # Four WGMMA k-blocks per K-tile: 128 B of K per row for 8-bit types, 64 elements for 16-bit.
        mma_k = cute.size(self.tiled_mma.shape_mnk, mode=[2])
        self.tile_mnk = (cfg.tile_m, cfg.tile_n, self.stage_k(mma_k))
        self.cta_layout_mnk = cute.make_layout((*self.cluster_shape_mn, 1))
        self.mcast_a = cfg.cluster_n  # A tile is shared by the CTAs of one cluster row
        self.mcast_b = cfg.cluster_m
        epi_m, epi_n = sm90_utils.compute_tile_shape_or_override(
            self.tile_mnk, d_dtype, is_cooperative=self.num_mma_wg == 2
        )
        # The epilogue sub-tiles must tile the CTA tile exactly: a 48/80/112-wide tile in 32-wide sub-tiles had its
        # last sub-tile store columns of the next tile (session 22: wrong results once a problem had several such
        # tiles; single tiles only clipped at the tensor edge).
        self.epi_tile = (epi_m, math.gcd(epi_n, cfg.tile_n))
        self.epi_stages = 4 if cfg.tile_n >= 64 else 2
        ab_bytes = self.a_stage_bytes() + cfg.tile_n * b_dtype.width * self.tile_mnk[2] // 8
        epi_bytes = cute.size(self.epi_tile) * d_dtype.width // 8 * self.epi_stages
        self.stage_extra_bytes = self.choose_stage_extra_bytes(ab_bytes, epi_bytes)
        epi_bytes = cute.size(self.epi_tile) * d_dtype.width // 8 * self.epi_stages  # the hook may trade epi stages
        ab_bytes += self.stage_extra_bytes
        # cluster split-K: rank 0 receives the other ranks' partials (32-bit words, one slot per rank > 0)
        self.reduce_words = (self.split_cluster - 1) * cfg.tile_m * cfg.tile_n
        fit = self.stages_that_fit(ab_bytes, epi_bytes + 4 * self.reduce_words)
        self.ab_stages = cfg.stages if cfg.stages else min(fit, _MAX_STAGES)
        per_cta = f" (the share of one of {cfg.ctas_per_sm} CTAs per SM)" if cfg.ctas_per_sm > 1 else ""
        if self.ab_stages < 2 or self.ab_stages > fit:
            raise ValueError(f"TileConfig.stages={cfg.stages}: {fit} stages of {ab_bytes} B fit in shared memory"
                             f"{per_cta}; at least 2 are needed")
        self.make_smem_layouts()
        # The count above leaves 1 KB for the barriers and the regions' alignment, but the struct also pads each
        # region to its alignment and its whole size to 1 KB (weight-only 1-bit g128 with four K-tiles per stage on
        # 32-token tiles: 10 stages = 233472 B, which a launch refuses). Fewer stages until the real size fits.
        self.shared_storage = self.make_shared_storage()
        while self.shared_storage.size_in_bytes() > self.smem_bytes:
            if cfg.stages or self.ab_stages <= 2:
                raise ValueError(f"{self.ab_stages} pipeline stages (TileConfig.stages={cfg.stages}): the shared "
                                 f"storage takes {self.shared_storage.size_in_bytes()} B > {self.smem_bytes} B"
                                 f"{per_cta}; use a smaller tile or fewer CTAs per SM")
            self.ab_stages -= 1
            self.make_smem_layouts()
            self.shared_storage = self.make_shared_storage()

    def make_smem_layouts(self):
        """The shared-memory layouts of ``self.ab_stages`` A/B stages, the epilogue and the mainloop's operands."""
        self.mainloop_smem_words = self.stage_extra_bytes // 4 * self.ab_stages
        self.sA_layout = self.make_smem_layout_a(self.ab_stages)
        self.a_tile = self.a_tma_tile()
        self.sB_layout = sm90_utils.make_smem_layout_b(self.b_layout, self.tile_mnk, self.b_dtype, self.ab_stages)
        self.sD_layout = sm90_utils.make_smem_layout_epi(self.d_dtype, self.d_layout, self.epi_tile, self.epi_stages)

    def make_shared_storage(self):
        """The kernel's shared-memory struct for the current layouts (its ``size_in_bytes`` is what a launch
        allocates)."""

        # (fields built as values: this module's annotations are strings, which cute.struct does not evaluate)
        fields = {
            "ab_mbar": cute.struct.MemRange[cutlass.Int64, self.ab_stages * 2],
            "sA": cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(self.sA_layout)], 1024],
            "sB": cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.sB_layout)], 1024],
            "sD": cute.struct.Align[cute.struct.MemRange[self.d_dtype, cute.cosize(self.sD_layout)], 1024],
            # per-stage operands of a subclass's mainloop (e.g. FP8 a_scale columns), loaded with the stage
            "sML": cute.struct.Align[cute.struct.MemRange[cutlass.Float32, max(1, self.mainloop_smem_words)], 128],
            "split_flag": cute.struct.MemRange[cutlass.Int32, 1],  # split-K: the semaphore value, broadcast
        }
        if self.split_cluster > 1:
            # cluster split-K (``cluster_reduce``): the received partials, and the full (rank 0) / free (rank > 0)
            # barriers of the hand-over
            fields["reduce_buf"] = cute.struct.Align[cute.struct.MemRange[cutlass.Int32, self.reduce_words], 16]
            fields["reduce_mbar"] = cute.struct.MemRange[cutlass.Int64, 2]
        return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

    def stage_k(self, mma_k: int) -> int:
        """K of one pipeline stage: four WGMMA k-blocks (a subclass may stage more)."""
        return mma_k * 4

    def stages_that_fit(self, stage_bytes: int, epi_bytes: int) -> int:
        return (self.smem_bytes - 1024 - epi_bytes) // stage_bytes

    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, epi_tensors: tuple, stream,
                 split: cutlass.Constexpr = None, timeline: cutlass.Constexpr = None):
        """mA (M, K, L), mB (N, K, L), mD (M, N, L); epi_tensors in ``self.operand_names`` order (the epilogue's
        operands, then a subclass's mainloop operands). ``split``: None, or (workspace tensor of the accumulator
        type, semaphore Int32 tensor, K slices per split tile, positions run whole first) for split-K, the last two
        run-time Int32 values (``PersistentTileSchedule.split_args``, ``split_k_fixup``). ``timeline``: None, or an
        Int64 tensor (CTAs, TIMELINE_SLOTS) the kernel writes its ``stamp``s into (a diagnostic build)."""
        self._setup(mA.element_type, mB.element_type, mD.element_type,
                    LayoutEnum.from_tensor(mA), LayoutEnum.from_tensor(mB), LayoutEnum.from_tensor(mD))
        sA1 = cute.slice_(self.sA_layout, (None, None, 0))
        sB1 = cute.slice_(self.sB_layout, (None, None, 0))
        tma_a, tA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SMulticastOp() if self.mcast_a > 1 else cpasync.CopyBulkTensorTileG2SOp(),
            mA, sA1, self.a_tile, num_multicast=self.mcast_a,
        )
        tma_b, tB = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SMulticastOp() if self.mcast_b > 1 else cpasync.CopyBulkTensorTileG2SOp(),
            mB, sB1, (self.tile_mnk[1], self.tile_mnk[2]), num_multicast=self.mcast_b,
        )
        tma_d, tD = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mD, cute.slice_(self.sD_layout, (None, None, 0)), self.epi_tile
        )
        num_tiles = cute.zipped_divide(mD, tiler=self.tile_mnk[:2])[(0, (None, None, None))].shape
        if cutlass.const_expr((self.masked_dim is not None or self.row_groups) and split is not None):
            raise ValueError("masked batches and row groups run unsplit (split=None)")
        split_walk = None
        if cutlass.const_expr(split is not None):
            # (workspace, semaphores, schedule's split arguments)
            split_walk = (split[0], split[1], self.schedule.split_args(num_tiles, split[2], split[3]))
        grid = self.schedule.grid(num_tiles, self.max_active_clusters, self.split_args(split_walk))

        mainloop_tma = self.make_mainloop_tma(dict(zip(self.operand_names, epi_tensors)))
        sched_args = self.schedule.device_args(num_tiles)
        if cutlass.const_expr(self.row_groups):
            sched_args = (*sched_args, mB.shape[2])  # the experts: B's batches (``tile_of``)

        self.kernel(
            tma_a, tA, tma_b, tB, tma_d, tD, mD.shape, epi_tensors, self.tiled_mma, self.cta_layout_mnk,
            self.sA_layout, self.sB_layout, self.sD_layout, sched_args, split_walk,
            mainloop_tma, timeline,
        ).launch(grid=grid, block=[self.num_threads, 1, 1], cluster=(*self.launch_cluster_mn, 1),
                 min_blocks_per_mp=self.config.ctas_per_sm, stream=stream, use_pdl=self.use_pdl,
                 # all of the SM's unified L1/shared memory as shared memory (also spares the DSL a device query
                 # for its per-SM size when min_blocks_per_mp > 1, so the CPU machine compiles it)
                 preferred_smem_carveout=100 if self.config.ctas_per_sm > 1 else None)

    # ------------------------------------------------------------------ device
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_d: cute.CopyAtom, mD: cute.Tensor, d_shape, epi_tensors: tuple, tiled_mma: cute.TiledMma,
               cta_layout_mnk: cute.Layout, sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sD_layout: cute.ComposedLayout, sched_args: tuple, split,
               mainloop_tma: tuple, timeline):
        tidx, _, _ = cute.arch.thread_idx()
        if tidx == 0:
            self.stamp(timeline, TL_ENTRY)
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_d)

        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord = cta_layout_mnk.get_flat_coord(cta_rank)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sD = storage.sD.get_tensor(sD_layout.outer, swizzle=sD_layout.inner)

        tx_bytes = cute.size_in_bytes(self.a_dtype, cute.slice_(sA_layout, (None, None, 0))) + cute.size_in_bytes(
            self.b_dtype, cute.slice_(sB_layout, (None, None, 0))) + self.stage_extra_bytes
        sML = storage.sML.get_tensor(cute.make_layout(max(1, self.mainloop_smem_words)))
        # Each consumer warp releases a buffer once per multicast peer that wrote into it.
        consumer_arrivals = (self.mcast_a + self.mcast_b - 1) * self.num_mma_wg * 4
        ab_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ab_mbar.data_ptr(), num_stages=self.ab_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_arrivals),
            tx_count=tx_bytes, cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)), defer_sync=True,
        )
        if cutlass.const_expr(self.split_cluster > 1):
            if tidx == 0:
                cute.arch.mbarrier_init(storage.reduce_mbar.data_ptr(), 1)  # full: rank 0's expect_tx arrive
                cute.arch.mbarrier_init(storage.reduce_mbar.data_ptr() + 1, 1)  # free: rank 0's remote arrive
        # (the launch's cluster: with split_cluster the K ranks must see each other's barriers initialized)
        pipeline_init_arrive(cluster_shape_mn=self.launch_cluster_mn, is_relaxed=True)

        # (bM, bK, tiles_m, tiles_k, L) views of the operands and (bM, bN, tiles_m, tiles_n, L) of the output.
        gA = cute.local_tile(mA, self.a_tile, (None, None, None))
        gB = cute.local_tile(mB, cute.slice_(self.tile_mnk, (0, None, None)), (None, None, None))
        gD = cute.local_tile(mD, cute.slice_(self.tile_mnk, (None, None, 0)), (None, None, None))
        cD = cute.local_tile(cute.make_identity_tensor(d_shape), cute.slice_(self.tile_mnk, (None, None, 0)),
                             (None, None, None))
        k_tiles = cute.size(gA, mode=[3])
        # What a clamped tile must end inside: the rows of the operand whose boxes it moves (A for M, B for N), which
        # may exceed the output's (the weight-only path pads x to whole token tiles in some cases: no move then).
        extents = (mA.shape[0], mB.shape[0])

        tAsA, tAgA = cpasync.tma_partition(
            tma_a, cluster_coord[1], cute.make_layout(cute.slice_(cta_layout_mnk, (0, None, 0)).shape),
            cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, cluster_coord[0], cute.make_layout(cute.slice_(cta_layout_mnk, (None, 0, 0)).shape),
            cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
        a_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord, mode=1) if self.mcast_a > 1 else 0
        b_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord, mode=0) if self.mcast_b > 1 else 0

        wg_idx = cute.arch.make_warp_uniform(tidx // self.threads_per_wg)
        pipeline_init_wait(cluster_shape_mn=self.launch_cluster_mn)
        if cutlass.const_expr(self.l2_warmup > 0):
            if warp_idx == 0:
                self.warm_l2(tma_a, tAgA, tma_b, tBgB, sched_args, k_tiles, split)
        if cutlass.const_expr(self.weight_preload > 0):
            if warp_idx == 0:
                self.preload_weights(ab_pipe, (tma_a, tma_b), (tAgA, tBgB), (tAsA, tBsB), (a_mask, b_mask),
                                     mainloop_tma, sML, sched_args, k_tiles, split)
        if cutlass.const_expr(self.use_pdl):
            # Programmatic dependent launch: this grid may be scheduled while the previous kernel on the stream is
            # finishing, so the setup above (barrier init, descriptor prefetch, layouts) overlaps that kernel's
            # tail. Nothing in global memory is read or written before the previous grid has completed. Our own
            # dependents may launch at once: their CTAs only get an SM when one of ours exits.
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        if tidx == 0:
            self.stamp(timeline, TL_WAITED)

        if wg_idx == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp_idx == 0:
                sched = self.schedule
                work, work_stride = sched.first_work(), sched.work_stride()
                work_end = self.work_count(sched_args, split, epi_tensors)
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stages)
                ml_loads = self.prepare_mainloop_loads(mainloop_tma, sML)
                # K-tiles of the first unit whose stages ``preload_weights`` acquired and filled with the weight
                preloaded = cutlass.Int32(0)
                if cutlass.const_expr(self.weight_preload > 0):
                    _, _, preloaded = self.first_unit_preload(sched_args, k_tiles, split)
                while work < work_end:
                    pos, s_idx, n_slices = self.work_unit(split, work)
                    tile = self.tile_of(sched_args, pos, epi_tensors)
                    l_idx = tile[2]
                    k_begin, k_count = self.slice_range(s_idx, n_slices, k_tiles)
                    if cutlass.const_expr(self.row_groups):  # no expert: nothing to load (the consumers skip it)
                        k_count = cutlass.select_(tile[3] < 0, cutlass.Int32(0), cutlass.Int32(k_count))
                    shift = self.tile_shifts(tile, extents)
                    tAgA_t = tAgA[(None, tile[0], None, l_idx)]
                    tBgB_t = tBgB[(None, tile[1], None, self.b_batch(tile))]
                    if cutlass.const_expr(self.clamp[0]):
                        _, tAgA_s = self.tma_box_partition(tma_a, mA, self.a_tile, sA, shift[0], cluster_coord[1],
                                                           cute.slice_(cta_layout_mnk, (0, None, 0)))
                        tAgA_t = tAgA_s[(None, tile[0], None, l_idx)]
                    if cutlass.const_expr(self.clamp[1]):
                        _, tBgB_s = self.tma_box_partition(tma_b, mB, cute.slice_(self.tile_mnk, (0, None, None)),
                                                           sB, shift[1], cluster_coord[0],
                                                           cute.slice_(cta_layout_mnk, (None, 0, 0)))
                        tBgB_t = tBgB_s[(None, tile[1], None, self.b_batch(tile))]
                    state.reset_count()
                    for _k in range(k_count):
                        if cutlass.const_expr(self.weight_preload == 0):
                            ab_pipe.producer_acquire(state)
                            bar = ab_pipe.producer_get_barrier(state)
                            cute.copy(tma_a, tAgA_t[(None, k_begin + state.count)], tAsA[(None, state.index)],
                                      tma_bar_ptr=bar, mcast_mask=a_mask)
                            cute.copy(tma_b, tBgB_t[(None, k_begin + state.count)], tBsB[(None, state.index)],
                                      tma_bar_ptr=bar, mcast_mask=b_mask)
                            self.issue_mainloop_loads(ml_loads, state.index, bar, tile, shift, l_idx,
                                                      k_begin + state.count)
                        else:
                            # A preloaded stage is already acquired and holds its weight (and, when they are the
                            # weight's, its mainloop operands): only the activation's load is left.
                            fresh = state.count >= preloaded
                            if fresh:
                                ab_pipe.producer_acquire(state)
                            bar = ab_pipe.producer_get_barrier(state)
                            k_idx = k_begin + state.count
                            if cutlass.const_expr(self.weight_operand == 0):
                                if fresh:
                                    cute.copy(tma_a, tAgA_t[(None, k_idx)], tAsA[(None, state.index)],
                                              tma_bar_ptr=bar, mcast_mask=a_mask)
                                cute.copy(tma_b, tBgB_t[(None, k_idx)], tBsB[(None, state.index)],
                                          tma_bar_ptr=bar, mcast_mask=b_mask)
                            else:
                                cute.copy(tma_a, tAgA_t[(None, k_idx)], tAsA[(None, state.index)],
                                          tma_bar_ptr=bar, mcast_mask=a_mask)
                                if fresh:
                                    cute.copy(tma_b, tBgB_t[(None, k_idx)], tBsB[(None, state.index)],
                                              tma_bar_ptr=bar, mcast_mask=b_mask)
                            if cutlass.const_expr(self.mainloop_loads_static):
                                if fresh:
                                    self.issue_mainloop_loads(ml_loads, state.index, bar, tile, shift, l_idx, k_idx)
                            else:
                                self.issue_mainloop_loads(ml_loads, state.index, bar, tile, shift, l_idx, k_idx)
                        ab_pipe.producer_commit(state)
                        state.advance()
                    preloaded = cutlass.Int32(0)
                    work += work_stride
                ab_pipe.producer_tail(state)
                if tidx == 0:
                    self.stamp(timeline, TL_PRODUCER_END)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            reduce = None
            if cutlass.const_expr(self.split_cluster > 1):
                reduce = (storage.reduce_buf.get_tensor(cute.make_layout(self.reduce_words)),
                          storage.reduce_mbar.data_ptr())
            self.consumer(tiled_mma, ab_pipe, sA, sB, sD, gD, cD, extents, epi_tensors, tma_d, k_tiles,
                          sched_args, tidx, warp_idx, wg_idx, split, storage.split_flag.get_tensor(cute.make_layout(1)),
                          sML, timeline, reduce)

    @cute.jit
    def consumer(self, tiled_mma: cute.TiledMma, ab_pipe, sA: cute.Tensor, sB: cute.Tensor, sD: cute.Tensor,
                 gD: cute.Tensor, cD: cute.Tensor, extents, epi_tensors: tuple, tma_d: cute.CopyAtom,
                 k_tiles, sched_args, tidx, warp_idx, wg_idx, split, split_flag: cute.Tensor, sML: cute.Tensor,
                 timeline=None, reduce=None):
        mma_tidx = tidx - self.threads_per_wg
        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        thr_mma = tiled_mma.get_slice(
            cute.make_layout(self.num_mma_wg, stride=self.threads_per_wg)(wg_idx - 1))
        tCrA = self.make_fragment_a(tiled_mma, thr_mma, sA)
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gD).shape[:3], self.acc_dtype)

        # Epilogue plumbing: registers -> smem (stmatrix) -> gmem (TMA store), one sub-tile at a time.
        r2s_atom = sm90_utils.sm90_get_smem_store_op(self.d_layout, elem_ty_d=self.d_dtype,
                                                      elem_ty_acc=self.acc_dtype)
        # The stmatrix atom only shapes the thread/value layout of the register -> smem copy (the same for every
        # output width, which keeps the retiled accumulator's order); r2s_atom is what actually stores (stmatrix
        # for 16-bit outputs, plain stores for fp32).
        r2s_c_atom = cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(self.d_layout.is_m_major_c(), 4), self.d_dtype)
        tiled_r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(r2s_c_atom, tiled_mma))
        thr_r2s = tiled_r2s.get_slice(mma_tidx)
        tRS_sD = thr_r2s.partition_D(sD)
        tRS_rAcc = tiled_r2s.retile(acc)
        frag_shape = cute.shape(thr_r2s.partition_S(sD))[:3]
        tRS_rFrag = cute.make_rmem_tensor(frag_shape, self.acc_dtype)
        tRS_rOut = cute.make_rmem_tensor(frag_shape, self.d_dtype)
        frag_size = cute.size(tRS_rFrag)
        store_pipe = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_threads))
        tensors = dict(zip(self.operand_names, epi_tensors))
        tensors["smem"] = sML  # the mainloop's per-stage shared-memory operands (``choose_stage_extra_bytes``)
        tensors["sA"] = sA  # the staged A operand, for mainloops that read it themselves (register-sourced WGMMA)
        tensors["sB"] = sB  # the staged B operand, for mainloops that read it themselves (mma.sync)
        tensors["timeline"] = timeline
        if cutlass.const_expr(self.row_groups):
            tensors["row_group"] = cutlass.Int32(-1)  # set per tile below (a loop-carried entry must exist first)

        sched = self.schedule
        work, work_stride = sched.first_work(), sched.work_stride()
        work_end = self.work_count(sched_args, split, epi_tensors)
        tiles_done = cutlass.Int32(0)  # work tiles this CTA finished: the epilogue's store-buffer phase
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stages)
        reduced = cutlass.Int32(0)  # cluster split-K: tiles handed over so far (the barriers' phase)
        while work < work_end:
            pos, s_idx, n_slices = self.work_unit(split, work)
            tile = self.tile_of(sched_args, pos, epi_tensors)  # the output tile
            if cutlass.const_expr(self.row_groups):
                tensors["row_group"] = tile[3]  # its expert, -1 for none (epilogues.RowGroupGuard)
            k_begin, k_count = self.slice_range(s_idx, n_slices, k_tiles)
            shift = self.tile_shifts(tile, extents)
            origin = (tile[0] * self.tile_mnk[0] + shift[0], tile[1] * self.tile_mnk[1] + shift[1])
            # Coordinates of this thread's accumulator registers. thr_mma is a warpgroup-wide slice (right for the
            # smem operand descriptors, but its C partition is thread 0's); the per-thread slice gives the real
            # coordinates. Element j of the retiled accumulator is register tRS_rAcc.layout(j) (a static index).
            tCcD = tiled_mma.get_slice(mma_tidx).partition_C(
                cute.domain_offset(shift, cD[(None, None, *tile[:3])]))
            if cutlass.const_expr(self.row_groups):
                if tile[3] >= 0:
                    read, release = self.mainloop(tiled_mma, ab_pipe, tCrA, tCrB, acc, read, release, k_begin,
                                                  k_count, tile, origin, tCcD, tensors)
                else:  # no expert: the producer loaded nothing; the epilogue writes the tile (RowGroupGuard)
                    acc.fill(0)
            else:
                read, release = self.mainloop(tiled_mma, ab_pipe, tCrA, tCrB, acc, read, release, k_begin, k_count,
                                              tile, origin, tCcD, tensors)
            if mma_tidx == 0:
                self.stamp(timeline, TL_MAINLOOP_END)
            # The scheduler rounds the tile grid up to whole clusters: a tile past the output's last row or column
            # tile (M = 5 with a 2x1 cluster has one) computes what nobody reads - zeros, or with a clamped origin
            # the last tile's values again - and stores nothing. Split-K: it skips the fix-up too (nobody reads its
            # partials; when the scratch was sized by the real tiles, writing its stripes overran the workspace into
            # whatever the caching allocator had placed behind it - the scratch now has room for every split
            # position's CTAs, see ops.split_k.plan_split_k).
            tiles_m, tiles_n = cute.size(gD, mode=[2]), cute.size(gD, mode=[3])
            if tile[0] < tiles_m:
                if tile[1] < tiles_n:
                    if cutlass.const_expr(self.split_cluster > 1):
                        if self.cluster_reduce(acc, reduce, reduced, mma_tidx):
                            self.epilogue_tile(acc, tile, shift, gD, sD, tCcD, tensors, tma_d, tiled_r2s, tRS_sD,
                                               tRS_rAcc, tRS_rFrag, tRS_rOut, frag_size, store_pipe, tiles_done,
                                               warp_idx)
                        reduced += 1
                    elif cutlass.const_expr(split is None):
                        self.epilogue_tile(acc, tile, shift, gD, sD, tCcD, tensors, tma_d, tiled_r2s, tRS_sD,
                                           tRS_rAcc, tRS_rFrag, tRS_rOut, frag_size, store_pipe, tiles_done, warp_idx)
                    else:
                        run_epilogue = cutlass.Boolean(True)
                        if n_slices > 1:
                            # The tile's scratch: its place among the split (tail) positions, then its CTA's rank in
                            # the cluster (every CTA of a cluster takes the same K slice of its own tile).
                            split_tile = (pos - split[2][1]) * math.prod(self.cluster_shape_mn) + cta_rank
                            run_epilogue = self.split_k_fixup(acc, split, s_idx, n_slices, split_tile, mma_tidx,
                                                              split_flag)
                        if run_epilogue:
                            self.epilogue_tile(acc, tile, shift, gD, sD, tCcD, tensors, tma_d, tiled_r2s, tRS_sD,
                                               tRS_rAcc, tRS_rFrag, tRS_rOut, frag_size, store_pipe, tiles_done,
                                               warp_idx)
            work += work_stride
            tiles_done += 1
        if cutlass.const_expr(self.split_cluster > 1):
            self.cluster_reduce_drain(reduce, reduced)
        store_pipe.producer_tail()
        if mma_tidx == 0:
            self.stamp(timeline, TL_CONSUMER_END)
            self.stamp(timeline, TL_UNITS, tiles_done)

    # ------------------------------------------------------------------ the work list
    @cute.jit
    def work_count(self, sched_args, split, epi_tensors):
        """Work units in the list every role walks: the static schedule's, or the masked batches' live tiles."""
        if cutlass.const_expr(self.masked_dim is None):
            return self.schedule.work_count(sched_args, self.split_args(split))
        return self.masked_work_count(sched_args, epi_tensors[-1])

    @cute.jit
    def tile_of(self, sched_args, pos, epi_tensors):
        """(m tile, n tile, L index) of work position ``pos``; with ``row_groups`` a fourth entry, the tile's expert
        (B's batch index): that of the tile's first row, -1 when it names none of B's batches."""
        if cutlass.const_expr(self.row_groups):
            tile = self.schedule.tile_of(sched_args, pos)
            m_indices = epi_tensors[self.operand_names.index("m_indices")]
            row = cutlass.min(tile[0] * self.tile_mnk[0], cute.size(m_indices, mode=[0]) - 1)
            expert = m_indices[row]
            expert = cutlass.select_(expert < sched_args[-1], cutlass.max(expert, -1), cutlass.Int32(-1))
            return (*tile, cute.arch.make_warp_uniform(expert))
        if cutlass.const_expr(self.masked_dim is None):
            return self.schedule.tile_of(sched_args, pos)
        return self.masked_tile_of(sched_args, epi_tensors[-1], pos)

    @staticmethod
    def b_batch(tile):
        """B's batch index of a ``tile_of`` tile: its L index, or with row groups its expert."""
        return tile[3] if len(tile) == 4 else tile[2]

    @cute.jit
    def masked_token_tiles(self, masked_m: cute.Tensor, batch, token_tiles):
        """Token tiles of ``batch`` that reach one of its ``masked_m`` valid rows (a count past the extent counts as
        the extent, one <= 0 as none)."""
        d = self.masked_dim
        rows = cutlass.min(cutlass.max(masked_m[batch], 0), token_tiles * self.tile_mnk[d])
        return (rows + self.tile_mnk[d] - 1) // self.tile_mnk[d]

    @cute.jit
    def masked_work_count(self, sched_args, masked_m: cute.Tensor):
        tiles = sched_args[0]  # (M tiles, N tiles, L) of the whole output
        d = self.masked_dim
        total = cutlass.Int32(0)
        for batch in cutlass.range(tiles[2], unroll=1):
            total += self.masked_token_tiles(masked_m, batch, tiles[d])
        return total * tiles[1 - d]

    @cute.jit
    def masked_tile_of(self, sched_args, masked_m: cute.Tensor, pos):
        """The live tile at position ``pos`` of the masked work list: batch by batch (a scan over ``masked_m``, L
        cached loads per tile: cheap beside a tile's mainloop), then weight tile, then token tile."""
        tiles = sched_args[0]
        d = self.masked_dim
        weight_tiles = tiles[1 - d]
        batch, local, token_tiles, base = cutlass.Int32(0), cutlass.Int32(0), cutlass.Int32(1), cutlass.Int32(0)
        found = cutlass.Boolean(False)
        for b in cutlass.range(tiles[2], unroll=1):
            count = self.masked_token_tiles(masked_m, b, tiles[d])
            if not found:
                if pos < base + count * weight_tiles:
                    batch, local, token_tiles, found = b, pos - base, count, cutlass.Boolean(True)
                else:
                    base += count * weight_tiles
        token, weight = local % token_tiles, local // token_tiles
        coords = (token, weight) if d == 0 else (weight, token)
        return (cute.arch.make_warp_uniform(coords[0]), cute.arch.make_warp_uniform(coords[1]),
                cute.arch.make_warp_uniform(batch))

    @cute.jit
    def tile_shifts(self, tile, extents):
        """(M, N) offsets, <= 0, that move a tile's origin back so that the tile ends at the edge of ``extents`` (the
        rows of the operand loaded along M / N): nonzero for the last tile of a clamped dimension (``self.clamp``)
        when the extent is not a whole number of tiles and is at least one tile (a tile past the last one, which
        clusters can add, moves to the same origin).

        Why: a TMA box that runs far past its tensor's last row costs more than loading real rows (session 21 on the
        weight-only path; session 22 measured int8 and FP8: e.g. int8 M = 257 on 128-row tiles 1.56-1.63x the time
        of M = 512). The moved tile recomputes rows the tile before it also computes - the same values, stored
        twice."""
        shifts = []
        for d in cutlass.range_constexpr(2):
            s = cutlass.Int32(0)
            if cutlass.const_expr(self.clamp[d]):
                start = tile[d] * self.tile_mnk[d]
                limit = extents[d] - self.tile_mnk[d]
                if cutlass.const_expr(self.clamp_align[d] > 1):
                    limit = (limit + self.clamp_align[d] - 1) // self.clamp_align[d] * self.clamp_align[d]
                s = cutlass.max(cutlass.min(start, limit), 0) - start
            shifts.append(s)
        return tuple(shifts)

    def tma_box_partition(self, atom, tensor: cute.Tensor, tiler, staged: cute.Tensor, row_shift=None, cta_coord=0,
                          cta_layout=None):
        """(shared-memory, global) TMA partitions of ``tensor`` (rows, columns, L) in boxes of ``tiler`` into
        ``staged`` (box rows, box columns, stages): the global one indexed (box, row tile, column tile, L). With
        ``row_shift`` every box's rows move by that many rows (a clamped tile's ``tile_shifts`` entry); with a
        multicast atom, ``cta_coord`` / ``cta_layout`` are this CTA's place among the CTAs that share the box.
        Used by the producer for A / B of clamped tiles and for the mainloops' per-stage row boxes."""
        if row_shift is not None:
            tensor = cute.domain_offset((row_shift, 0, 0), tensor)
        boxes = cute.local_tile(tensor, tiler, (None, None, None))
        layout = cute.make_layout(1) if cta_layout is None else cute.make_layout(cta_layout.shape)
        return cpasync.tma_partition(atom, cta_coord, layout, cute.group_modes(staged, 0, 2),
                                     cute.group_modes(boxes, 0, 2))

    @cute.jit
    def warm_l2(self, tma_a, tAgA, tma_b, tBgB, sched_args, k_tiles, split):
        """TMA prefetches into L2 of the first ``l2_warmup`` K-tiles of this CTA's first work tile. Safe before
        ``griddepcontrol.wait`` even if the previous kernel writes these operands: L2 is where every write to this
        GPU's memory lands, so the loads issued after the wait read the current bytes whether or not the prefetch
        saw them."""
        work = self.schedule.first_work()
        if work < self.schedule.work_count(sched_args, self.split_args(split)):
            pos, s_idx, n_slices = self.work_unit(split, work)
            tile = self.schedule.tile_of(sched_args, pos)
            l_idx = tile[2]
            k_begin, k_count = self.slice_range(s_idx, n_slices, k_tiles)
            for k in range(cutlass.min(k_count, self.l2_warmup)):
                cute.prefetch(tma_b, tBgB[(None, tile[1], k_begin + k, l_idx)])
                cute.prefetch(tma_a, tAgA[(None, tile[0], k_begin + k, l_idx)])

    @cute.jit
    def first_unit_preload(self, sched_args, k_tiles, split):
        """(tile, first K-tile, K-tiles to preload) of this CTA's first work unit; 0 K-tiles if it has none."""
        sched = self.schedule
        work = sched.first_work()
        pos, s_idx, n_slices = self.work_unit(split, work)
        tile = sched.tile_of(sched_args, pos)
        k_begin, k_count = self.slice_range(s_idx, n_slices, k_tiles)
        count = cutlass.Int32(0)
        if work < sched.work_count(sched_args, self.split_args(split)):
            count = cutlass.min(k_count, min(self.weight_preload, self.ab_stages))
        return tile, k_begin, count

    @cute.jit
    def preload_weights(self, ab_pipe, tmas, gmem, smem, masks, mainloop_tma, sML, sched_args, k_tiles, split):
        """Before ``griddepcontrol.wait``: acquire the first ``weight_preload`` stages of the ring (each expects its
        full stage's bytes) and TMA the weight operand of the first work unit's K-tiles into them, plus the
        mainloop's per-stage operands where they belong to the weight (``mainloop_loads_static``). The producer
        adds the activations after the wait, so a stage completes only once both are in.

        Why: a decode-size call streams weights at copy bandwidth once its ring is full, but filling the ring
        after the wait costs 1.7-5.7 µs (docs/int8_scaled_mm.md, session 26), while the previous kernel's last CTAs
        leave the memory system partly idle. The weight does not depend on the previous kernel - unless that kernel
        writes it, which is why this is only for weights (parameters), never for activations or scales computed
        on the stream: TMA loads before the wait may read bytes the previous grid has not written yet."""
        tile, k_begin, count = self.first_unit_preload(sched_args, k_tiles, split)
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stages)
        op = self.weight_operand
        ml_loads = self.prepare_mainloop_loads(mainloop_tma, sML) if cutlass.const_expr(
            self.mainloop_loads_static) else None
        for _k in range(count):
            ab_pipe.producer_acquire(state)
            bar = ab_pipe.producer_get_barrier(state)
            g = gmem[op][(None, tile[op], k_begin + state.count, tile[2])]
            cute.copy(tmas[op], g, smem[op][(None, state.index)], tma_bar_ptr=bar, mcast_mask=masks[op])
            if cutlass.const_expr(self.mainloop_loads_static):
                self.issue_mainloop_loads(ml_loads, state.index, bar, tile, (0, 0), tile[2], k_begin + state.count)
            state.advance()

    # ------------------------------------------------------------------ diagnostic timeline (``timeline`` given)
    # benchmarks/experiments/timeline.py compiles kernels with a timeline tensor; without one (every shipped build)
    # these compile to nothing (the CPU tests check that no timer read reaches the shipped SASS).
    @staticmethod
    def _timeline_row():
        bx, by, bz = cute.arch.block_idx()
        gx, gy, _ = cute.arch.grid_dim()
        return bx + gx * (by + gy * bz)

    @cute.jit
    def stamp(self, timeline, slot: cutlass.Constexpr, value=None):
        """timeline[CTA, slot] = the global nanosecond timer, or ``value`` | SM id << 32."""
        if cutlass.const_expr(timeline is not None):
            v = cute.arch.globaltimer()
            if cutlass.const_expr(value is not None):
                v = cutlass.Int64(value) | (cutlass.Int64(cute.arch.smid()) << 32)
            timeline[self._timeline_row(), slot] = v

    @cute.jit
    def stamp_first_data(self, tensors: dict):
        """In a mainloop, after a consumer_wait: the first time a CTA's first consumer thread gets a full stage."""
        timeline = tensors["timeline"]
        if cutlass.const_expr(timeline is not None):
            tidx, _, _ = cute.arch.thread_idx()
            if tidx == self.threads_per_wg:
                row = self._timeline_row()
                if timeline[row, TL_FIRST_DATA] == 0:
                    timeline[row, TL_FIRST_DATA] = cute.arch.globaltimer()

    @cute.jit
    def work_unit(self, split, work):
        """(position, K slice, K slices) of work index ``work``: the schedule's ``split_unit``, or with
        ``split_cluster`` the position itself, K slice = this CTA's rank in its cluster."""
        if cutlass.const_expr(self.split_cluster > 1):
            rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
            return work, cutlass.Int32(rank), cutlass.Int32(self.split_cluster)
        return self.schedule.split_unit(self.split_args(split), work)

    @cute.jit
    def cluster_reduce(self, acc: cute.Tensor, reduce, reduced, mma_tidx):
        """Cluster split-K hand-over of one tile (``split_cluster``): every rank > 0 stores its partial accumulator
        into its slot of rank 0's ``reduce_buf`` with ``st.async`` (DSMEM), completing transaction bytes on rank
        0's full barrier; rank 0 waits for all of them, adds the slots in rank order (so a floating-point sum does
        not depend on arrival) and tells each sender its slot is free again. Returns True on rank 0, which runs the
        epilogue. ``reduced``: tiles this CTA handed over before (the barriers' phase).

        Why: the workspace fix-up (``split_k_fixup``) puts an L2 round trip for the partials, a GPU-scope fence and
        an atomic on every split tile's critical path (session 13: ~0.6 µs of a 4096^2 int8 decode call); here the
        partials go SM to SM and the full barrier's transaction count is what orders them before rank 0's loads (no
        fence). Session 28: 0.94-0.99x the time on the decode rows that take it (docs/int8_scaled_mm.md)."""
        buf, mbar = reduce
        full, free = mbar, mbar + 1
        frag = cute.size(acc)
        slot = self.num_mma_threads * frag
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        words = cute.recast_tensor(acc, cutlass.Int32) if cutlass.const_expr(self.acc_dtype != cutlass.Int32) else acc
        is_root = rank == 0
        if is_root:
            if mma_tidx == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(full, (self.split_cluster - 1) * slot * 4)
            cute.arch.mbarrier_wait(full, reduced % 2)
            got = buf if cutlass.const_expr(self.acc_dtype == cutlass.Int32) else cute.make_tensor(
                cute.recast_ptr(buf.iterator, dtype=self.acc_dtype), buf.layout)
            for r in cutlass.range_constexpr(1, self.split_cluster):
                for i in cutlass.range_constexpr(frag):
                    acc[i] = acc[i] + got[(r - 1) * slot + mma_tidx * frag + i]
            self.epi_barrier.arrive_and_wait()  # every slot read before a sender may refill it
            if mma_tidx == 0:
                for r in cutlass.range_constexpr(1, self.split_cluster):
                    # CTA scope (a cluster-scope release is a GPU-wide MEMBAR here): with one cluster per tile (the
                    # grid) this arrive only keeps rank 1 alive until the slot is read. A walk that reuses the slot
                    # needs scope=CLUSTER: with CTA scope rank 1's next stores overtook rank 0's reads on 128-row
                    # tiles (session 28's wrong results; session 29 on the GPU: cluster scope made them right).
                    cute.arch.mbarrier_arrive(free, r)
        else:
            if reduced > 0:
                cute.arch.mbarrier_wait(free, (reduced - 1) % 2)  # rank 0 has read this slot's previous tile
            # 16-byte stores (a thread's values are contiguous in its slot, frag a multiple of 4)
            first = cute.assume((rank - 1) * slot + mma_tidx * frag, divby=4)
            base = cute.make_ptr(cutlass.Int32, (buf.iterator + first).toint(), cute.AddressSpace.smem,
                                 assumed_align=16)
            for i in cutlass.range_constexpr(0, frag, 4):
                cute.arch.store_async_dsmem(base + i, (words[i], words[i + 1], words[i + 2], words[i + 3]), full, 0)
        return is_root

    @cute.jit
    def cluster_reduce_drain(self, reduce, reduced):
        """A rank > 0 stays until rank 0 has read its last tile's slot: rank 0's last arrive lands on this CTA's
        barrier, which must still exist."""
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        if rank > 0:
            if reduced > 0:
                cute.arch.mbarrier_wait(reduce[1] + 1, (reduced - 1) % 2)

    @staticmethod
    def split_args(split):
        """The schedule's split arguments of the kernel's ``split`` (None when unsplit)."""
        return None if split is None else split[2]

    @cute.jit
    def slice_range(self, s_idx, n_slices, k_tiles):
        """(first K-tile, number of K-tiles) of K slice ``s_idx`` of ``n_slices`` (``split_unit``); all of K for an
        unsplit walk, whose slice values are the constants (0, 1). With ``rank1_share`` < 8 (two-CTA cluster split-K)
        rank 1 takes the last ``rank1_share`` / 16 of the K-tiles and rank 0 the rest.

        Why uneven: rank 0 waits for rank 1's partial before its epilogue. When the stream is memory-bound (int8),
        rank 1 finishing early costs nothing - the SMs still streaming get its share of the bandwidth - and its
        partial is in rank 0's shared memory by the time rank 0's mainloop ends (session 29: int8 4096^2 at 1-64
        tokens 0.93-0.99x the time with 6/16). Where the consumers bound the mainloop (FP8's promotion, the
        weight-only decode) rank 0's extra K-tiles cost their full time: those keep halves."""
        k_begin, k_count = 0, k_tiles
        if cutlass.const_expr(self.rank1_share != 8):
            # rank 0's K-tiles; each rank keeps at least one (split plans have >= 2 K-tiles)
            first = cutlass.min(k_tiles - k_tiles * self.rank1_share // 16, k_tiles - 1)
            k_begin = s_idx * first
            k_count = first + s_idx * (k_tiles - 2 * first)
        elif cutlass.const_expr(not isinstance(n_slices, int)):
            k_begin = s_idx * k_tiles // n_slices
            k_count = (s_idx + 1) * k_tiles // n_slices - k_begin
        return k_begin, k_count

    @cute.jit
    def split_k_fixup(self, acc: cute.Tensor, split, s_idx, num_splits, tile_lin, mma_tidx, split_flag: cute.Tensor):
        """Split-K without a second kernel and without waiting: every K slice writes its partial accumulator to its
        own workspace stripe and bumps the tile's semaphore; the slice that arrives last reduces the stripes into
        its accumulator, resets the semaphore for the next launch and runs the epilogue. Nobody waits on another
        CTA, so no schedule can deadlock; the reduction order is fixed, so the result does not depend on arrival.

        ``tile_lin``: the tile's index among the split tiles (see ``consumer``). Workspace stripe of (tile, slice):
        [size(acc), num_mma_threads] words of the accumulator type (int32 or
        float32), value-major, so that the threads of a warp touch consecutive words for each register (coalesced;
        a thread-major stripe measured 2-5x slower end to end). Returns True on the CTA that must run the
        epilogue."""
        ws, sem = split[0], split[1]
        frag = cute.size(acc)
        threads = self.num_mma_threads
        per_slice = threads * frag
        mine = (tile_lin * num_splits + s_idx) * per_slice + mma_tidx
        for i in cutlass.range_constexpr(frag):
            ws[mine + i * threads] = acc[i]
        # One thread publishes and acquires for the CTA (the pattern of CUDA's grid sync and CUTLASS's generic
        # barrier): the barrier orders every thread's stripe stores before thread 0's acq_rel atomic, whose release
        # half is cumulative over them and whose acquire half (SASS: CCTL.IVALL, SM-wide) keeps L1 from serving
        # stale stripe lines to the loads below, which the second barrier orders after it. Session 13: a fence by
        # every thread before the atomic and again before the loads put three GPU-scope MEMBARs on this path instead
        # of one (int8 M = 1, N = K = 4096 on an H100: ~1 µs of a 9.5 µs call).
        self.epi_barrier.arrive_and_wait()
        if mma_tidx == 0:
            split_flag[0] = cute.arch.atomic_add(sem.iterator + tile_lin, cutlass.Int32(1), sem="acq_rel",
                                                 scope="gpu")
        self.epi_barrier.arrive_and_wait()
        is_last = split_flag[0] == num_splits - 1
        if is_last:
            # Integer partials: add the other slices' stripes to ours (any order is exact). Floating-point partials:
            # sum every stripe, ours included, in slice order, so that the rounding does not depend on which slice
            # happened to finish last (run-to-run identical results).
            if cutlass.const_expr(self.acc_dtype == cutlass.Int32):
                for other in range(num_splits):
                    if other != s_idx:
                        self.add_stripe(acc, ws, (tile_lin * num_splits + other) * per_slice + mma_tidx, threads)
            else:
                acc.fill(0)
                for other in range(num_splits):
                    self.add_stripe(acc, ws, (tile_lin * num_splits + other) * per_slice + mma_tidx, threads)
            if mma_tidx == 0:
                sem[tile_lin] = 0
        return is_last

    @cute.jit
    def add_stripe(self, acc: cute.Tensor, ws: cute.Tensor, start, threads):
        # Plain loads, so that all of a stripe's loads are in flight together (an explicit ld.cg is inline asm that
        # the compiler does not reorder: measured 5-8x slower). The acquire half of the arrival atomic already kept
        # this SM's L1 from serving stale lines.
        for i in cutlass.range_constexpr(cute.size(acc)):
            acc[i] = acc[i] + ws[start + i * threads]

    @cute.jit
    def epilogue_tile(self, acc: cute.Tensor, tile, shift, gD: cute.Tensor, sD: cute.Tensor, tCcD: cute.Tensor,
                      tensors: dict, tma_d: cute.CopyAtom, tiled_r2s, tRS_sD: cute.Tensor, tRS_rAcc: cute.Tensor,
                      tRS_rFrag: cute.Tensor, tRS_rOut: cute.Tensor, frag_size, store_pipe, tiles_done, warp_idx):
        """Registers -> epilogue tree -> smem (stmatrix) -> gmem (TMA store), one epilogue sub-tile at a time."""
        gD_tile = cute.domain_offset(shift, gD[(None, None, *tile[:3])])
        gD_epi = cute.zipped_divide(gD_tile, self.epi_tile)
        bSG_sD, bSG_gD = cpasync.tma_partition(tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gD_epi)
        epi_count = cute.size(gD_epi, mode=[1])
        epi_grid = cute.make_layout(gD_epi.shape[1], stride=(gD_epi.shape[1][1], 1))
        done_before = tiles_done * epi_count
        # The epilogue's global operands (vectors, an added c) are loaded one sub-tile ahead, before the current
        # one's barriers, so their latency is not paid once per sub-tile (session 10, for c: M = 1024, N = K = 8192
        # with fp32 c 113.4 -> 109.4 µs, bf16 c 112.0 -> 104.8; session 37, for the vectors: int8 4096^2 at 4096
        # tokens 96.5 -> 91.9 µs, docs/int8_scaled_mm.md).
        pending = self.epilogue.fetch(_sub_tile_context(0, frag_size, tRS_rFrag, tRS_rAcc, tCcD, tensors))
        for e in cutlass.range_constexpr(epi_count):
            for v in cutlass.range_constexpr(frag_size):
                tRS_rFrag[v] = tRS_rAcc[e * frag_size + v]
            ctx = _sub_tile_context(e, frag_size, tRS_rFrag, tRS_rAcc, tCcD, tensors, pending)
            if cutlass.const_expr(e + 1 < epi_count):
                pending = self.epilogue.fetch(
                    _sub_tile_context(e + 1, frag_size, tRS_rFrag, tRS_rAcc, tCcD, tensors))
            tRS_rOut.store(self.epilogue.visit(ctx).to(self.d_dtype))
            buf = (done_before + e) % self.epi_stages
            cute.copy(tiled_r2s, tRS_rOut, tRS_sD[(None, None, None, buf)])
            # stmatrix writes go through the generic proxy; TMA reads through the async proxy.
            cute.arch.fence_proxy("async.shared", space="cta")
            self.epi_barrier.arrive_and_wait()
            if warp_idx == self.epi_store_warp:
                cute.copy(tma_d, bSG_sD[(None, buf)], bSG_gD[(None, epi_grid.get_hier_coord(e))])
                store_pipe.producer_commit()
                store_pipe.producer_acquire()
            self.epi_barrier.arrive_and_wait()

    # ------------------------------------------------------------------ hooks for the A operand
    # The defaults stage A as the WGMMA's shared-memory operand. The weight-only kernel (weight_only_wgmma.py)
    # stages packed low-bit weights instead and feeds WGMMA from registers it decodes them into.
    def make_tiled_mma(self) -> cute.TiledMma:
        return sm90_utils.make_trivial_tiled_mma(
            self.a_dtype, self.b_dtype, self.a_layout.sm90_mma_major_mode(), self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype, self.atom_layout_mnk, tiler_mn=(64, self.config.tile_n),
        )

    def a_stage_bytes(self) -> int:
        """Bytes of A in one pipeline stage."""
        return self.config.tile_m * self.a_dtype.width * self.tile_mnk[2] // 8

    def make_smem_layout_a(self, stages: int):
        """The staged shared-memory layout of A (a ComposedLayout: swizzle o layout), ``stages`` buffers."""
        return sm90_utils.make_smem_layout_a(self.a_layout, self.tile_mnk, self.a_dtype, stages)

    def a_tma_tile(self) -> tuple:
        """The tile of A one stage loads, in A's own (rows, columns) coordinates: its TMA box and ``local_tile``
        tiler. A's column tiles must be as many as B's K-tiles."""
        return self.tile_mnk[0], self.tile_mnk[2]

    def make_fragment_a(self, tiled_mma: cute.TiledMma, thr_mma, sA: cute.Tensor) -> cute.Tensor:
        """The WGMMA A operand of a consumer warpgroup: shared-memory descriptors over every stage."""
        return tiled_mma.make_fragment_A(thr_mma.partition_A(sA))

    # ------------------------------------------------------------------ hooks for per-stage mainloop operands
    def choose_stage_extra_bytes(self, ab_bytes: int, epi_bytes: int) -> int:
        """Bytes a subclass's mainloop loads with each A/B stage (TMA, on the stage's full barrier), given the A/B
        bytes of a stage and the epilogue's shared memory (it may lower ``self.epi_stages`` to make room); 0 here."""
        return 0

    def make_mainloop_tma(self, tensors: dict) -> tuple:
        """Host side: the TMA atoms (and their tensors) of those loads, from the global operands by name."""
        return ()

    @cute.jit
    def prepare_mainloop_loads(self, mainloop_tma: tuple, sML: cute.Tensor):
        """Producer, once: partition the mainloop's TMA tensors against its shared memory ``sML``."""
        return None

    @cute.jit
    def issue_mainloop_loads(self, prepared, stage, bar, tile, shift, l_idx, k):
        """Producer, per stage: issue the mainloop's loads of K-tile ``k`` of output tile ``tile`` (whose origin is
        moved by ``shift``, see ``tile_shifts``)."""
        pass

    # The per-stage operands of the mainloops so far (FP8's a_scale columns, the weight-only path's group parameters)
    # are one box per stage of a (rows, columns, L) tensor: the tile's rows x a few columns for the stage's K range.
    @staticmethod
    def row_box_tma(tensor: cute.Tensor, box: tuple) -> tuple:
        """``make_mainloop_tma`` of such an operand: its TMA atom and tensor for (tile rows, columns) boxes."""
        atom, tma_tensor = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), tensor, cute.make_layout(box),
                                                       box)
        return atom, tma_tensor

    @cute.jit
    def partition_row_boxes(self, mainloop_tma: tuple, staged: cute.Tensor, box: tuple):
        """``prepare_mainloop_loads`` of a ``row_box_tma`` operand; ``staged``: its (box rows, box columns, stage)
        shared-memory view."""
        atom, tma_tensor = mainloop_tma
        s_part, g_part = self.tma_box_partition(atom, tma_tensor, box, staged)
        return atom, s_part, g_part, tma_tensor, staged, box

    @cute.jit
    def issue_row_box(self, prepared, stage, bar, row_tile, column_tile, l_idx, row_shift=None):
        """Producer: the box (row_tile, column_tile) into stage ``stage``, on the stage's barrier ``bar``; with
        ``row_shift`` (a clamped tile's ``tile_shifts`` entry) the box's rows move by that much (if the rows are the
        tensor's innermost dimension, ``clamp_align`` must keep the start 16-byte aligned)."""
        atom, s_part, g_part, tma_tensor, staged, box = prepared
        if cutlass.const_expr(row_shift is not None):
            _, g_part = self.tma_box_partition(atom, tma_tensor, box, staged, row_shift)
        cute.copy(atom, g_part[(None, row_tile, column_tile, l_idx)], s_part[(None, stage)], tma_bar_ptr=bar)

    @cute.jit
    def mainloop(self, tiled_mma: cute.TiledMma, ab_pipe, tCrA: cute.Tensor, tCrB: cute.Tensor, acc: cute.Tensor,
                 read, release, k_begin, k_tiles, tile, origin, tCcD: cute.Tensor, tensors: dict):
        """Accumulate one output tile (K-tiles [k_begin, k_begin + k_tiles) of it) into ``acc``; returns the
        advanced (read, release) pipeline states.

        One K-tile of WGMMA stays in flight while the next is issued. ``k_begin``, ``tile``, ``origin`` (the tile's
        first (m, n), ``tile_shifts`` included), ``tCcD`` (this thread's accumulator coordinates) and ``tensors`` are
        unused here; subclasses that rescale per K-tile need them.
        """
        k_blocks = cute.size(tCrA, mode=[2])
        read.reset_count()
        release.reset_count()
        # The first K-tile's first WGMMA overwrites the accumulator (ACCUMULATE off) instead of the accumulator being
        # zero-filled: register writes that ptxas sees between the fence and the first WGMMA made it serialize every
        # WGMMA of the small swapped tiles (C7514, a WARPGROUP.DEPBAR after each IGMMA; session 20). Every work tile
        # has at least one K-tile (K >= 16, at most one K slice per K-tile).
        warpgroup.fence()
        ab_pipe.consumer_wait(read)
        self.stamp_first_data(tensors)
        for kb in cutlass.range_constexpr(k_blocks):
            tiled_mma.set(warpgroup.Field.ACCUMULATE, kb != 0)
            cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)], acc)
        warpgroup.commit_group()
        read.advance()
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        for _k in range(1, k_tiles):
            ab_pipe.consumer_wait(read)
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)],
                          acc)
            warpgroup.commit_group()
            warpgroup.wait_group(1)  # the previous K-tile's WGMMAs are done: its buffer goes back to the producer
            ab_pipe.consumer_release(release)
            release.advance()
            read.advance()
        warpgroup.wait_group(0)
        ab_pipe.consumer_release(release)
        release.advance()
        return read, release


def _sub_tile_context(e, frag_size, frag, acc_retiled, tCcD, tensors, fetched=None) -> EpilogueContext:
    """The epilogue tree's view of sub-tile ``e``: its fragment and each element's (m, n, l) coordinate (element v
    of sub-tile e is register ``acc_retiled.layout(e * frag_size + v)`` of the accumulator, a static index)."""
    return EpilogueContext(acc=frag, coord=lambda v: tCcD[acc_retiled.layout(e * frag_size + v)], tensors=tensors,
                           fetched=fetched)
