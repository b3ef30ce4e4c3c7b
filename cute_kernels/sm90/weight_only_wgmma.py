"""Weight-only GEMM on SM90 tensor cores: packed 1/2/4/8-bit weights decoded in registers into WGMMA's A operand.

Computes, in the kernel's swapped coordinates (weight rows on WGMMA's M, tokens on its N):
    D[n, m] = epilogue( sum_k w(n, k) * x[m, k] )        w(n, k) = (decode(code[n, k]) [- zero[n, g]]) [* s[n, g]]
  i.e. out = x @ W^T written through an M-major view of out (D = out^T). The decode is the weight format's
  (``weight_only.formats``: the same ``decode_pair`` the mma.sync kernel uses), in the activation dtype (fp16/bf16).

Layouts (host: ``weight_only/wgmma.py``)
  blob  int64 [ceil(N/64), ceil(K/64) * 64 * bits]: the packed codes re-ordered once per weight so that
        one 64-row x 64-K block is 128 threads x ``bits`` 32-bit words, thread-major: thread t of a warpgroup finds,
        in its words, exactly the values of its WGMMA A fragment for that K-tile (4 k-blocks x 8 values; rows
        16 * warp + lane / 4 (+ 8), K 2 * (lane % 4) (+ 1, + 8, + 9) within a k-block), packed as the format's
        pairs (pair q of a word = elements ``pair_elems(q)``). A row block's K-tiles are contiguous in memory, so
        one stage's TMA box (tile_m / 64 blocks x k_tiles_per_stage K-tiles) is tile_m / 64 runs of
        512 * bits * k_tiles_per_stage bytes.
  x     [M, K] fp16/bf16, K contiguous: WGMMA's B operand (shared memory, 128B-swizzled, TMA).
  out   [M, N] row-major, x's dtype (the host routes other output dtypes elsewhere).
  params int32 [K / G * W, N] (with group scales / zero points; host: ``param_words``): the format's W decode-context
        words per (row, group) (``WeightFormat.context_words``: the scale already rounded to x's dtype in the low
        half of word 0, the high half the scale again or the one-fma constant C, W = 1; AWQ's exact format W = 2,
        -(MAGIC + zero point) in word 1), precomputed once per weight. N is the contiguous axis: the producer's TMA
        stages a (tile_m rows x the stage's groups' words) box of it with each stage.

Pipeline (``Sm90GemmKernel``: producer warp, two consumer warpgroups of 64 weight rows, persistent schedule,
epilogue tree -> stmatrix -> TMA store, in-kernel split-K): the producer's TMA stages k_tiles_per_stage K-tiles of the
blob and of x together (2 for 1/2-bit weights, whose K-tiles are only 0.5-1 KB of codes per 64 rows, and for 4-bit
weights on 16-token tiles, where the per-stage round trip is a large part of each K-tile's time; else 1).
Per K-tile a consumer thread loads its 4 * bits bytes of packed codes from shared memory, decodes them into a
register A fragment and issues the K-tile's four register-sourced WGMMAs with x from shared memory. Four A fragments
rotate over the K-tiles (two on 256-token tiles: ``default_a_buffers``) and wait_group(3) keeps three K-tiles of
WGMMAs in flight while the next one is decoded (the fragment being written is never one a WGMMA still reads); a stage is released once the WGMMAs of its last K-tile are
done. The group parameters of a stage arrive with it (one more TMA box on the stage's barrier) and are read from
shared memory at the K-tile that uses them. Session 16 measured why: read from global memory by the consumers, even
two or four K-tiles ahead, they cost 3-5 µs of an 8192^2 AWQ GEMM at 1-64 tokens, in either layout. Sessions 15-16
measured these choices (benchmarks/experiments/wo_wgmma_small.py; docs/weight_only.md).
With ``sync_mma`` (1/2-bit weights at <= 8 tokens, ``wgmma.launch_variant``) the consumers issue the same K-tiles as
``mma.sync`` instead (``mainloop_sync``): same decode, same accumulator registers and epilogue, x's fragments by
``ldmatrix`` from the staged x tile, each stage released as soon as its MMAs have issued (session 31: 0.83-0.98x the
time; the WGMMA path's stream itself, without any consumer work, measured ~5.6 / 8.0 µs for the 8.4 / 16.8 MB of
1/2-bit 8192^2).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32, Uint32
from cutlass.cute.nvgpu import OperandMajorMode, warpgroup

from ..compile_utils import kernel_view
from ..configs import TileConfig
from ..epilogues import EpilogueTree
from ..weight_only import ptx
from ..weight_only.formats import BF16, F16, WeightFormat
from .gemm import Sm90GemmKernel

BLOCK_ROWS = 64  # weight rows of one warpgroup's WGMMA atom: one block of the blob
K_TILE = 64  # K of one K-tile: four k-blocks of a 16-bit WGMMA (a stage holds k_tiles_per_stage of them)
PAIRS_PER_K_TILE = 16  # a thread's A fragment of one K-tile: 4 k-blocks x 4 registers (pairs of values)


def releases_a_stage(h: int, a_buffers: int, kps: int) -> bool:
    """Whether the wait after K-tile ``h`` of an unrolled round (rounds are whole stages) completes a stage: the wait
    leaves a_buffers - 1 K-tiles of WGMMAs in flight, so K-tile h - (a_buffers - 1) is done, and when that is the last
    K-tile of its stage the stage can go back to the producer (from the round's second stage on: ``may_release``)."""
    return (h - (a_buffers - 1)) % kps == kps - 1


def stages_left_at_end(a_buffers: int, kps: int) -> int:
    """Stages of a work tile still held after its last K-tile (at most the tile's stage count): those whose last
    K-tile is among the a_buffers - 1 still in flight, released after the final wait_group(0)."""
    return -(-(a_buffers - 1) // kps)


class WeightOnlyWgmmaSm90(Sm90GemmKernel):
    """One compiled variant = (weight format, activation dtype, D dtype, group size, scales / zeros, TileConfig)."""

    mainloop_loads_static = True  # the staged group parameters belong to the weight

    def __init__(self, config: TileConfig, epilogue: EpilogueTree, fmt: WeightFormat, group: int, has_scales: bool,
                 sm_count: int = 132, l2_warmup: int | None = None, a_buffers: int | None = None,
                 k_tiles_per_stage: int | None = None, weight_preload: int = 0, split_cluster: int = 1,
                 sync_mma: int = 0):
        """a_buffers: A fragments = K-tiles whose WGMMAs may be in flight (2, 4; None: ``default_a_buffers``).
        k_tiles_per_stage: 64-value K-tiles per pipeline stage (1, 2, 4; None: 2 for 1/2-bit weights and for 4-bit
        16-token tiles, else 1). Where a row block's codes of one stage are wider than TMA's 256-element box limit
        (4-bit with 2 or 4) the DSL issues the stage's A copy as several boxes. l2_warmup: ``Sm90GemmKernel``'s, in
        stages (None: 4 for 4-bit weights, else off). The defaults are what sessions 15-17 measured fastest
        (benchmarks/experiments/wo_wgmma_small.py): l2_warmup 4 made 4-bit weights 1-12% faster at 1-16 tokens on 3 of
        4 layers (AWQ's 14336 x 4096 1-2% slower; mixed for 1/2-bit); two 4-bit K-tiles per stage made AWQ and grouped
        int4 3-9% faster at 12-16 tokens on every layer (four: 7-20% slower), but were mixed at 64 tokens."""
        if k_tiles_per_stage is None:
            k_tiles_per_stage = 2 if fmt.bits <= 2 or config.tile_n <= 16 else 1
        if a_buffers is None:
            a_buffers = self.default_a_buffers(config)
        if l2_warmup is None:
            l2_warmup = 4 if fmt.bits == 4 else 0
        if fmt.bits not in (1, 2, 4, 8):
            raise ValueError(f"the WGMMA weight-only kernel decodes 1/2/4/8-bit formats; got {fmt.bits}-bit {fmt.name}")
        if config.swap_ab or config.cluster_m * config.cluster_n != 1:
            raise ValueError("the WGMMA weight-only kernel runs unswapped tiles without clusters")
        has_zeros = fmt.has_zeros
        if (has_scales or has_zeros) and not (group % K_TILE == 0 or K_TILE % group == 0):
            raise ValueError(f"group = {group} must divide or be a multiple of the K-tile ({K_TILE})")
        for name, value, allowed in (("a_buffers", a_buffers, (2, 4)),
                                     ("k_tiles_per_stage", k_tiles_per_stage, (1, 2, 4))):
            if value not in allowed:
                raise ValueError(f"{name} = {value}: must be one of {allowed}")
        self.mainloop_operand_names = ("params",) if (has_scales or has_zeros) else ()
        self.kps = k_tiles_per_stage
        # The tokens (the kernel's N) end their last tile at x's last row (``Sm90GemmKernel.tile_shifts``): no box
        # of x runs past its end once x has one tile's rows (``wgmma.x_rows`` pads x below one tile, and for two
        # 256-token tiles, where a moved tile measured slower than a padded one).
        super().__init__(config, epilogue, Float32, sm_count=sm_count, l2_warmup=l2_warmup, clamp=(False, True),
                         weight_preload=weight_preload, weight_operand=0, split_cluster=split_cluster)
        self.fmt, self.group, self.has_scales, self.has_zeros = fmt, group, has_scales, has_zeros
        self.a_buffers = a_buffers  # wait_group(a_buffers - 1) after each K-tile
        self.words = fmt.bits  # 32-bit words of codes per thread and K-tile (32 values)
        self.tile_bytes = BLOCK_ROWS * K_TILE * fmt.bits // 8  # codes of one 64-row block's K-tile
        # decode contexts per row and K-tile: one per group the K-tile touches
        self.groups_per_tile = max(1, K_TILE // group) if (has_scales or has_zeros) else 0
        # groups of one stage's parameter box (a stage's K-tiles lie in one group, or span whole groups), and the
        # words of each
        self.groups_per_stage = max(1, K_TILE * self.kps // group) if self.groups_per_tile else 0
        self.words_per_group = fmt.context_word_count(has_scales) if self.groups_per_tile else 0
        if sync_mma and (sync_mma % 8 or sync_mma > config.tile_n):
            raise ValueError(f"sync_mma = {sync_mma}: must be a multiple of 8 up to tile_n = {config.tile_n}")
        self.sync_mma = sync_mma  # > 0: mma.sync over the first sync_mma tokens of a tile instead of WGMMA

    @staticmethod
    def default_a_buffers(config: TileConfig) -> int:
        """Four A fragments (three K-tiles of WGMMAs in flight; session 15) up to 128-token tiles; two on 256-token
        tiles, whose 128 accumulator registers per thread leave too few for four: there ptxas serializes the
        WGMMAs (a ``WARPGROUP.DEPBAR`` after every HGMMA, no spills, no warning in the build). That went unnoticed
        from session 15 to 20 and cost 13-32% at 256-1024 tokens (bench_awq, H100: 14336 x 4096 at 1024 tokens
        228.95 us in session 14, 285.83 in session 20; a CPU test now checks every shipped config's SASS)."""
        return 4 if config.tile_n <= 128 else 2

    # ------------------------------------------------------------------ the A operand: packed codes, registers
    def make_tiled_mma(self) -> cute.TiledMma:
        return sm90_utils.make_trivial_tiled_mma(
            self.b_dtype, self.b_dtype, OperandMajorMode.K, self.b_layout.sm90_mma_major_mode(), self.acc_dtype,
            self.atom_layout_mnk, tiler_mn=(64, self.config.tile_n), a_source=warpgroup.OperandSource.RMEM)

    def stage_k(self, mma_k: int) -> int:
        return K_TILE * self.kps

    def a_stage_bytes(self) -> int:
        return self.config.tile_m * K_TILE * self.kps * self.fmt.bits // 8

    def a_tma_tile(self) -> tuple:
        # (row blocks, int64 words of one block's K-tiles of a stage: contiguous in the blob)
        return self.config.tile_m // BLOCK_ROWS, BLOCK_ROWS * K_TILE * self.kps * self.fmt.bits // 64

    def make_smem_layout_a(self, stages: int):
        rows, cols = self.a_tma_tile()
        plain = cute.make_layout((rows, cols, stages), stride=(cols, 1, rows * cols))
        return cute.make_composed_layout(cute.make_swizzle(0, 4, 3), 0, plain)  # no swizzle: threads read rows

    def make_smem_layouts(self):
        super().make_smem_layouts()
        if self.sync_mma:  # the staged x layout ``mainloop_sync``'s ldmatrix addresses assume (byte offsets)
            tile = self.x_tile_bytes()
            for n, k, s in ((1, 0, 0), (9, 8, 0), (3, K_TILE * (self.kps - 1) + 17, 1)):
                expect = s * tile * self.kps + k // K_TILE * tile + n // 8 * 1024 + n % 8 * 128 + k % K_TILE * 2
                got = cute.crd2idx((n, k, s), self.sB_layout.outer) * 2
                if got != expect:
                    raise ValueError(f"sync_mma: x stage layout {self.sB_layout} is not the one mainloop_sync reads")
            if str(self.sB_layout.inner) != "S<3,4,3>":
                raise ValueError(f"sync_mma: x stage swizzle {self.sB_layout.inner} is not the 128-byte one")

    def make_fragment_a(self, tiled_mma: cute.TiledMma, thr_mma, sA: cute.Tensor) -> cute.Tensor:
        return tiled_mma.make_fragment_A(thr_mma.partition_shape_A((self.tile_mnk[0], K_TILE)))  # one K-tile

    # ------------------------------------------------------------------ the group parameters: TMA with the stage
    def choose_stage_extra_bytes(self, ab_bytes: int, epi_bytes: int) -> int:
        return self.config.tile_m * self.groups_per_stage * self.words_per_group * 4

    def param_box(self) -> tuple:
        """One stage's box of the parameter words: (tile_m rows, the words of the stage's groups)."""
        return self.config.tile_m, self.groups_per_stage * self.words_per_group

    def make_mainloop_tma(self, tensors: dict) -> tuple:
        if not self.groups_per_tile:
            return ()
        return self.row_box_tma(kernel_view(tensors["params"], 1, 0), self.param_box())  # (N, groups * W, 1)

    def param_stage_layout(self) -> cute.Layout:
        """(tile_m rows, groups_per_stage * words_per_group, stage) over the mainloop's shared memory (int32)."""
        rows, words = self.param_box()
        return cute.make_layout((rows, words, self.ab_stages), stride=(1, rows, rows * words))

    def param_stages(self, sML: cute.Tensor) -> cute.Tensor:
        """The staged parameter words (``param_stage_layout``)."""
        return cute.make_tensor(cute.recast_ptr(sML.iterator, dtype=Int32), self.param_stage_layout())

    @cute.jit
    def prepare_mainloop_loads(self, mainloop_tma: tuple, sML: cute.Tensor):
        if cutlass.const_expr(not self.groups_per_tile):
            return None
        return self.partition_row_boxes(mainloop_tma, self.param_stages(sML), self.param_box())

    @cute.jit
    def issue_mainloop_loads(self, prepared, stage, bar, tile, shift, l_idx, k):
        if cutlass.const_expr(self.groups_per_tile > 0):
            # stage k's groups start at k * K_TILE * kps / G, in units of groups_per_stage (rows and groups past the
            # tensor are zero-filled: their codes and x are zero too, or their rows are not stored)
            column_tile = k * (K_TILE * self.kps) // (self.group * self.groups_per_stage)
            self.issue_row_box(prepared, stage, bar, tile[0], column_tile, l_idx)

    # ------------------------------------------------------------------ mainloop
    @cute.jit
    def mainloop(self, tiled_mma: cute.TiledMma, ab_pipe, tCrA: cute.Tensor, tCrB: cute.Tensor, acc: cute.Tensor,
                 read, release, k_begin, k_tiles, tile, origin, tCcD: cute.Tensor, tensors: dict):
        ct = F16 if cutlass.const_expr(self.b_dtype == cutlass.Float16) else BF16
        if cutlass.const_expr(self.sync_mma > 0):
            return self.mainloop_sync(ab_pipe, tCrA, acc, read, release, k_tiles, origin, tCcD, tensors, ct)
        kps, nf = self.kps, self.a_buffers
        a_base = self.codes_base(tensors)
        stage_bytes = self.a_stage_bytes()
        # A fragments rotate over K-tiles: the one being decoded is never one an in-flight WGMMA reads.
        frags = [tCrA] + [cute.make_rmem_tensor(tCrA.shape, self.b_dtype) for _ in range(nf - 1)]
        rows, s_params = self.decode_operands(origin, tCcD, tensors)

        read.reset_count()
        release.reset_count()
        acc.fill(0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        kt_count = k_tiles * kps  # whole stages (a stage past K is zero-filled by TMA and adds nothing)
        unroll = max(nf, kps)  # powers of two: every rotation is static within one unrolled round
        for q in range(kt_count // unroll):
            for h in cutlass.range_constexpr(unroll):
                t = q * unroll + h
                read, release = self.k_tile(tiled_mma, ab_pipe, frags[h % nf], tCrB, acc, read, release, a_base,
                                            stage_bytes, ct, s_params, rows, h, t >= nf - 1)
                if cutlass.const_expr(h == 0 and tensors["timeline"] is not None):
                    if q == 0:
                        self.stamp_first_data(tensors)  # diagnostic builds only
        rest = kt_count % unroll  # a multiple of kps
        for h in cutlass.range_constexpr(unroll - 1):  # the last ``rest`` K-tiles (h < rest)
            for _ in range((rest - h + unroll - 1) // unroll):
                t = kt_count - rest + h
                read, release = self.k_tile(tiled_mma, ab_pipe, frags[h % nf], tCrB, acc, read, release, a_base,
                                            stage_bytes, ct, s_params, rows, h, t >= nf - 1)
        warpgroup.wait_group(0)
        # the stages whose last WGMMAs only the final wait covered
        for _ in range(cutlass.min(k_tiles, stages_left_at_end(nf, kps))):
            ab_pipe.consumer_release(release)
            release.advance()
        return read, release

    @cute.jit
    def k_tile(self, tiled_mma: cute.TiledMma, ab_pipe, frag: cute.Tensor, tCrB: cute.Tensor, acc: cute.Tensor,
               read, release, a_base, stage_bytes, ct, s_params, rows, h, may_release):
        """One K-tile (number ``h`` of an unrolled round; K-tile h % kps of its stage): wait for the stage on its
        first K-tile, decode this thread's codes into ``frag`` (whose WGMMAs, a_buffers K-tiles ago, completed at
        an earlier wait), issue the four WGMMAs and keep a_buffers - 1 K-tiles of them in flight; a stage is
        released once the WGMMAs of its last K-tile are done. Returns the advanced pipeline states."""
        kps, nf = self.kps, self.a_buffers
        j = h % kps
        if cutlass.const_expr(j == 0):
            ab_pipe.consumer_wait(read)
        self.decode_k_tile(frag, a_base + read.index * stage_bytes + j * self.tile_bytes, ct, s_params, rows, j,
                           read.index)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(frag, mode=[2])):
            cute.gemm(tiled_mma, acc, frag[(None, None, kb)], tCrB[(None, None, 4 * j + kb, read.index)], acc)
        warpgroup.commit_group()
        warpgroup.wait_group(nf - 1)
        if cutlass.const_expr(releases_a_stage(h, nf, kps)):
            if may_release:
                ab_pipe.consumer_release(release)
                release.advance()
        if cutlass.const_expr(j == kps - 1):
            read.advance()
        return read, release

    # ------------------------------------------------------------------ mainloop on mma.sync (few tokens)
    @cute.jit
    def mainloop_sync(self, ab_pipe, tCrA: cute.Tensor, acc: cute.Tensor, read, release, k_tiles, origin,
                      tCcD: cute.Tensor, tensors: dict, ct):
        """The same K-tiles with ``mma.sync.m16n8k16`` instead of WGMMA, over the tile's first ``sync_mma`` tokens.

        A warp's slice of WGMMA's register A fragment (16 rows x 16 K per k-block) is exactly mma.sync's A fragment,
        and its slice of the 64 x N accumulator is mma.sync's C fragments of N / 8 token chunks in the same register
        order, so the decode and the epilogue are unchanged. x's B fragments come from the staged x tile with
        ``ldmatrix`` (the tile is K-major, 128-byte swizzled: row n of a 64-value K-tile is 128 bytes whose 16-byte
        chunk c sits at chunk c ^ (n % 8)). mma.sync reads its registers when it issues, so a stage is released right
        after the MMAs of its last K-tile, with no asynchronous group to wait for."""
        kps = self.kps
        a_base = self.codes_base(tensors)
        stage_bytes = self.a_stage_bytes()
        # ldmatrix row addresses: lane 8j + r reads row (token) r of matrix j = K columns 8j..8j+7 of a k-block pair
        # (``make_smem_layouts`` checks that the staged x tile has the layout ``x_tile_bytes`` describes)
        tidx, _, _ = cute.arch.thread_idx()
        lane = tidx % 32
        r, jm = lane % 8, lane // 8
        b_row = Int32(tensors["sB"].iterator.toint()) + r * 128
        b_off = [((4 * hh + jm) ^ r) * 16 for hh in range(2)]
        b_tile_bytes = self.x_tile_bytes()
        b_stage_bytes = b_tile_bytes * kps
        rows, s_params = self.decode_operands(origin, tCcD, tensors)
        chunks = self.sync_mma // 8
        read.reset_count()
        release.reset_count()
        acc.fill(0)
        # k-blocks alternate between two accumulators: consecutive MMAs into one accumulator wait for each other
        # (session 31: 0.90-0.98x the time of one chain; issuing a stage's loads first changed nothing)
        odd = cute.make_rmem_tensor(acc.shape, Float32)
        odd.fill(0)
        for q in range(k_tiles):
            ab_pipe.consumer_wait(read)
            for j in cutlass.range_constexpr(kps):
                self.decode_k_tile(tCrA, a_base + read.index * stage_bytes + j * self.tile_bytes, ct, s_params,
                                   rows, j, read.index)
                regs = cute.recast_tensor(tCrA, Uint32)
                xb = b_row + read.index * b_stage_bytes + j * b_tile_bytes
                for c in cutlass.range_constexpr(chunks):
                    xr = [ptx.ldmatrix_x4(xb + c * 1024 + b_off[hh]) for hh in range(2)]
                    for kb in cutlass.range_constexpr(4):
                        a = [regs[4 * kb + p] for p in range(4)]
                        b = [xr[kb // 2][2 * (kb % 2)], xr[kb // 2][2 * (kb % 2) + 1]]
                        part = odd if cutlass.const_expr(kb % 2) else acc
                        d = ptx.mma_m16n8k16(ct.name, a, b, [part[4 * c + e] for e in range(4)])
                        for e in cutlass.range_constexpr(4):
                            part[4 * c + e] = d[e]
            ab_pipe.consumer_release(release)
            release.advance()
            read.advance()
        for i in cutlass.range_constexpr(4 * chunks):
            acc[i] = acc[i] + odd[i]
        return read, release

    def x_tile_bytes(self) -> int:
        """Bytes of one staged 64-value K-tile of x: tile_n rows of 128 bytes, in 8-row atoms 1 KB apart."""
        return self.config.tile_n * K_TILE * 2

    @cute.jit
    def codes_base(self, tensors: dict):
        """Shared address of this thread's codes of K-tile 0 of stage 0: its warpgroup's block, then 4 * bits bytes
        per thread."""
        tidx, _, _ = cute.arch.thread_idx()
        wg = tidx // self.threads_per_wg - 1
        return (Int32(tensors["sA"].iterator.toint()) + wg * self.kps * self.tile_bytes
                + (tidx % self.threads_per_wg) * (4 * self.words))

    @cute.jit
    def decode_operands(self, origin, tCcD: cute.Tensor, tensors: dict):
        """(the two weight rows within the tile that this thread's A fragment and accumulator cover - WGMMA's
        fragment sub-mode 1 steps 8 rows -, the staged group parameters or None)."""
        rows = [tCcD[((0, j, 0), 0, 0)][0] - origin[0] for j in range(2)]
        s_params = self.param_stages(tensors["smem"]) if cutlass.const_expr(self.groups_per_tile > 0) else None
        return rows, s_params

    @cute.jit
    def decode_k_tile(self, frag: cute.Tensor, addr, ct, s_params, rows, j, stage):
        """Load this thread's codes of K-tile ``j`` of a stage (shared address ``addr``) and decode them into
        ``frag``."""
        words = []  # at most four words per load (8-bit weights: two 16-byte loads)
        for c in cutlass.range_constexpr(0, self.words, 4):
            words += ptx.ld_shared_words(addr + 4 * c, min(4, self.words - c))
        self.decode(words, frag, ct, self.decode_contexts(ct, s_params, rows, j, stage))

    @cute.jit
    def param_words(self, s_params: cute.Tensor, rows, j, stage):
        """The decode-context words of K-tile ``j`` of a stage (from shared memory): for the thread's row r and the
        g-th group the K-tile touches, the list at slot r * G + g."""
        first = j * K_TILE // self.group  # static: the K-tile's first group within the stage's box
        wpg = self.words_per_group
        return [[s_params[(rows[r], (first + g) * wpg + i, stage)].to(Uint32) for i in range(wpg)]
                for r in range(2) for g in range(self.groups_per_tile)]

    @cute.jit
    def decode_contexts(self, ct, s_params, rows, j, stage):
        """The format's decode context of each (row, group) slot; [None] without group parameters."""
        if cutlass.const_expr(s_params is None):
            return [None, None]
        return [self.fmt.group_ctx_words(ct, w) for w in self.param_words(s_params, rows, j, stage)]

    @cute.jit
    def decode(self, words, frag: cute.Tensor, ct, ctxs):
        """Pair P = 4 * kb + p of the thread's K-tile (p: 0 row r / K c, 1 row r + 8 / K c, 2 row r / K c + 8, 3 row
        r + 8 / K c + 8) is pair P % ppw of word P // ppw; it lands in register p of k-block kb of ``frag``."""
        regs = cute.recast_tensor(frag, Uint32)
        ppw = self.fmt.pairs_per_word
        prepared = [self.fmt.prepare_word(w, ct) for w in words]
        for pair in cutlass.range_constexpr(PAIRS_PER_K_TILE):
            kb, p = pair // 4, pair % 4
            row = p % 2
            slot = 0
            if cutlass.const_expr(self.groups_per_tile > 0):
                slot = row * self.groups_per_tile + kb * 16 * self.groups_per_tile // K_TILE
            regs[pair] = self.fmt.decode_pair(prepared[pair // ppw], pair % ppw, ct, ctxs[slot])
