"""WeightOnlyGemm: out = (x @ decode(W)^T) * scale for packed low-bit weights, one kernel template for every format.

What it computes
    out[m, n] = scale * sum_k x[m, k] * w(n, k)        w(n, k) = decode(code[n, k]) [* s[n, g]] [- zero]
with fp32 accumulation; ``w`` per format (``formats.py``): int8 / int4 / int2 / int1 codes of the seed's
``quantized_mm<BITS>`` (optionally times a per-(row, group) scale) or AWQ's ``(u - z) * s``.

Layouts (torch views the host passes; M, N, K and strides are dynamic)
    x    [M, K]  fp32 / fp16 / bf16, K contiguous, 16-byte aligned rows
    w    [N, K * bits / 8] uint8, K packed LSB-first (formats.bitpack); row bytes a multiple of 16 (with
         ``tile.fragment_order``: AWQ's repack, the same bytes in [N16, R64] fragment order, fragment_order.py)
    out  [M, N]  any float dtype, N contiguous
    gs   [N, K / group] scales (float dtype) or absent;  zeros [N, K / group] uint8 (AWQ only)

The template and its specializations
    One ``@cute.kernel`` below; the weight format (bit width, decode), the activation dtype and the tile shape are
    Python constants of the instance, so ``cute.compile`` emits one specialization per (format, dtype, tile) and the
    device code never branches on them - the seed's ``template<int BITS>`` with explicit instantiations.

Data path (per warp; g = lane / 4, t = lane % 4 - the mma.sync fragment coordinates)
    A warp owns ``tile.nt`` 16-row tiles of W (rows = the MMA's M) and ``tile.mt`` 8-column tiles of x^T (the
    MMA's N, i.e. tokens): it computes out^T = W x^T with ``mma.sync.m16n8k16`` (fp16/bf16 in, fp32 accumulate).
    * weights: each thread loads 16 bytes of row g and of row g + 8 of every tile per K step; the four threads of
      a quad cover 64 contiguous bytes of a row, a step covers 512 / bits K values. Two pipelines (``tile.stages``):
      128-bit ``ld.global.nc`` into a register double buffer (next step in flight while this one decodes; with
      ``swap_registers`` the loop is unrolled by two so the buffers swap roles, and ``min_ctas_hint`` tells ptxas
      the registers it may keep the loads ahead with), or a ``cp.async`` ring in shared memory where each thread
      owns its slots (``stages - 1`` steps in flight, no barrier, no registers held). Each packed byte is read once
      and decoded in registers straight into the A fragments (K is permuted inside each thread's chunk, which is
      legal because the activation fragment uses the same permutation - see formats.py); nothing else goes through
      shared memory.
    * activations: the thread's x[m, K run] (L1-cached, shared by all warps of the SM), B fragments built with prmt
      (activations.py). With ``tile.x_ahead`` the whole step's runs (and group scales / zero points) are loaded one
      step ahead with the weights; otherwise each word's run is loaded right before its MMAs (fewer registers).
    * split-K inside the CTA: ``tile.warps_k`` warps take interleaved K steps of the same rows and add their
      accumulators through shared memory at the end (deterministic; no atomics, no workspace).
    * group scales: folded into each decoded weight (one fp16/bf16 rounding per weight), or - ``promote_scales``,
      when every K step lies inside one group (group % (512 / bits) == 0, e.g. AWQ's G = 128 at 4 bits) - applied to
      the fp32 partial sums instead: each step's MMAs accumulate unscaled codes (exact small integers; AWQ's
      ``u - z`` too) into fresh registers, which one fma per accumulator then adds in at s[row, group]. That drops a
      packed multiply per weight pair from the decode, and the scale is never rounded to 16 bits. A format with
      ``zero_by_mma`` (AWQ's ``awq_zmma``) hands the MMA its codes with the magic number still in and follows each
      MMA by a correction MMA on the same x fragment (A = -(magic + zero point)), in the same accumulator. A K
      offset's group is found by a multiply and a shift (``group_of``; the launch turns the group size into its
      multiplier).
    * epilogue: fp32 accumulators * scale -> out dtype, predicated scalar stores (rows >= N, tokens >= M dropped).

Architectures
    SM90 (sm_90a) as described. SM80-class GPUs (sm_80/86/87/89) run the same code without what only SM90 has
    (``config.tile_for_arch``): no programmatic dependent launch (``pdl``), no L2 bulk prefetch, no loads before the
    wait, no CTA cap, a ring that fits their shared memory.

Two tile families use it (``config.py``): the decode path (M <= 16: 1-2 token tiles, 8 warps of split-K, meant to be
bound by the weight stream) and the tensor-core path for larger M (32 tokens per warp, warps along N, split-K only
for small M), where each decoded weight fragment feeds 4 MMAs. Measurements: docs/weight_only.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint32, const_expr, range_constexpr

from . import ptx
from .activations import activation_operand
from .formats import WeightFormat


# Group index of a K offset without an integer division. The kernels get ``group_multiplier(group)`` instead of the
# group size and find k's group with a multiply and a shift (``group_of``): a runtime divisor cost ~17 SASS
# instructions a K step in the decode loops (a sign-correcting division), 8% of the fp16 AWQ decode loop's 213
# (session 50, H200: those tiles are bound by issue, docs/weight_only.md). Exact while (k / 32) * (group / 32) <
# 2^GROUP_MUL_SHIFT, which ``GROUP_INDEX_MAX_K`` keeps for every layer of more than one group.
GROUP_MUL_SHIFT = 30
GROUP_INDEX_MAX_K = 1 << 20


def group_multiplier(group):
    """(host code of a ``cute.jit``, or Python ints) ceil(2^30 / d) with d = group // 32 (at least 1): what the
    kernels take in place of the group size. Groups are multiples of 32 or a single group (whose index the kernels
    clamp to 0 anyway)."""
    d = cutlass.max(group // 32, 1) if not isinstance(group, int) else max(group // 32, 1)
    return ((1 << GROUP_MUL_SHIFT) + d - 1) // d


def check_group_index_k(k: int, groups: int, k_name: str = "K") -> None:
    """The hosts' guard of ``group_of``'s range: K <= GROUP_INDEX_MAX_K wherever there is more than one group."""
    if groups > 1 and k > GROUP_INDEX_MAX_K:
        raise ValueError(f"{k_name} = {k} with more than one group: the kernels take {k_name} <= {GROUP_INDEX_MAX_K} "
                         "(kernel.group_of)")


def group_of(k, group_mul):
    """floor(k / group) for a K offset k >= 0, given ``group_multiplier(group)``: floor(k / 32) * mul >> 30, which
    equals floor(floor(k / 32) / d) while floor(k / 32) * d < 2^30."""
    return Int32((Int64(k >> 5) * Int64(group_mul)) >> GROUP_MUL_SHIFT)


SM90_SMEM_PER_SM = 228 * 1024  # shared memory of an H100 / H200 SM, which its CTAs share
SMEM_RESERVED_PER_CTA = 1024  # the driver's reservation per CTA
SM90_MAX_SMEM_PER_CTA = 227 * 1024  # the most dynamic shared memory one CTA can ask for


@dataclass(frozen=True)
class TileShape:
    """Compile-time tiling. nt: 16-row weight tiles per warp; mt: 8-token tiles per warp; warps_n x warps_k warps.

    stages: how the weight stream is kept in flight - 0: a register double buffer (the next K step's vectors load
    while this one decodes); >= 2: a ring of ``stages`` K steps in shared memory filled by ``cp.async`` (each
    thread owns its slots, so no barrier is needed: ``stages - 1`` steps in flight per warp without the registers).
    x_ahead: the step's activations (and group scales / zero points) are loaded one step ahead into registers, like
    the register double buffer of the weights, instead of at the top of the step that uses them.
    swap_registers: (register pipeline) the K loop is unrolled by two and the two weight buffers, and the two x /
    group-parameter buffers of ``x_ahead``, swap roles instead of the next step's being copied into the current's.
    token_major: the grid's fastest index runs over token tiles, so the CTAs of one row block that differ only in
    their tokens are scheduled together and all but one read the weights from L2 (M > 8 with one token tile per
    CTA: the weight stream stays one pass while each CTA keeps the registers of a single token tile).
    fields_in_place: the decode leaves a pair's fields where they fit in the mantissa and scales them down in the
    fma that removes the magic, instead of shifting every pair down to bit 0 (formats.py: fewer shifts, 1/2-bit and
    4-bit in fp16; same values).
    l2_prefetch_mb: > 0: each CTA first asks L2 for its rows' bytes with bulk prefetches (one per thread, before
    the wait for the previous grid), at most this many MB over the whole weight (the leading bytes of every row when
    it is larger), so the DRAM stream no longer waits on each warp's short chain of dependent loads.
    max_ctas_per_sm: > 0: at most this many CTAs share an SM, enforced through the launch's dynamic shared memory (a
    CTA reserves more than 1 / (max + 1) of the SM's). The decode grids are sized for 2 CTAs per SM
    (config.DECODE_CTAS_PER_SM); a kernel with few enough registers for 3 or 4 lets the block scheduler stack them
    on some SMs while others have fewer (measured in session 12, docs/weight_only.md).
    preload_weights: the first weight loads (the register buffer's first K step, or the ring's first stages - 1)
    are issued before the wait for the previous grid (configs.WEIGHT_PRELOAD's contract; session 27).
    acc_chains: independent accumulator sets a warp's MMAs alternate between (summed before the epilogue), so that
    consecutive MMAs of a step do not wait for each other's results.
    fragment_order: w is stored in the order the threads read it (``fragment_order.py``: [N16, R64], each 16-row
    tile's K step 1 KB of consecutive bytes), so a warp's load of 8 rows x 64 bytes is 512 contiguous bytes.
    prefetch_last: (with preload_weights and l2_prefetch_mb) the rows' L2 prefetch is issued after the preloaded
    step's loads instead of before them, so those loads leave ~100 instructions sooner (the prefetch is a loop over
    the rows; config.DECODE_PREFETCH_LAST_MAX_K says where that is faster).
    min_ctas_hint: > 0: the kernel declares that this many CTAs share an SM (``.minnctapersm``), so ptxas may use
    65536 / (hint x threads) registers a thread. Without it ptxas schedules the register pipeline for fewer registers
    than the two CTAs of the decode grids leave it, by sinking the next step's loads down to their first use, where
    the warp then waits for them (config.AWQ_DECODE_SWAP_MIN_STEPS: measured with ``swap_registers``).
    param_words: (formats with ``takes_param_words``: ``awq_zmma``) the group parameters arrive as one precomputed
    32-bit word per (row, group) in the scales' argument (int32 [N, groups]; no zeros argument) instead of a scale and
    a zero point: one load per row and K step instead of two, and no per-step conversion of the zero point into the
    format's corrections (``WeightFormat.param_word_ctx``; config.AWQ_PARAM_WORDS_WARPS_N says where).
    """

    nt: int
    mt: int
    warps_n: int
    warps_k: int
    stages: int = 0
    x_ahead: bool = False
    token_major: bool = False
    swap_registers: bool = False
    fields_in_place: bool = False
    l2_prefetch_mb: int = 0
    max_ctas_per_sm: int = 0
    preload_weights: bool = False
    acc_chains: int = 1
    fragment_order: bool = False
    prefetch_last: bool = False
    min_ctas_hint: int = 0
    param_words: bool = False

    @property
    def rows_per_cta(self) -> int:
        return 16 * self.nt * self.warps_n

    @property
    def tokens_per_cta(self) -> int:
        return 8 * self.mt

    @property
    def threads(self) -> int:
        return 32 * self.warps_n * self.warps_k

    @property
    def row_slots(self) -> int:
        """Weight rows a thread reads: g and g + 8 of each of its tiles."""
        return 2 * self.nt

    @property
    def vectors(self) -> int:
        """16-byte weight vectors a thread loads per K step (one of each of its rows)."""
        return 2 * self.nt

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.vectors * self.threads * 16

    @property
    def key(self) -> tuple:
        return (self.nt, self.mt, self.warps_n, self.warps_k, self.stages, self.x_ahead, self.token_major,
                self.swap_registers, self.fields_in_place, self.l2_prefetch_mb, self.max_ctas_per_sm) + (
                    ("preload",) if self.preload_weights else ()) + (
                    (("acc_chains", self.acc_chains),) if self.acc_chains != 1 else ()) + (
                    ("frag",) if self.fragment_order else ()) + (("pflast",) if self.prefetch_last else ()) + (
                    (("minctas", self.min_ctas_hint),) if self.min_ctas_hint else ()) + (
                    ("pwords",) if self.param_words else ())

    def validate(self) -> "TileShape":
        """Raise ValueError naming the field when the tile cannot launch (a caller-forced ``tile=``); else self."""
        for name in ("nt", "mt", "warps_n", "warps_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"TileShape.{name} must be >= 1; got {getattr(self, name)}")
        if self.threads > 1024:
            raise ValueError(f"TileShape: warps_n * warps_k * 32 = {self.threads} threads per CTA exceeds 1024")
        if self.acc_chains < 1:
            raise ValueError(f"TileShape.acc_chains must be >= 1; got {self.acc_chains}")
        if self.min_ctas_hint < 0 or self.min_ctas_hint * self.threads > 2048:
            raise ValueError(f"TileShape.min_ctas_hint must be 0 or a count of CTAs whose threads fit an SM (<= 2048); "
                             f"got {self.min_ctas_hint} x {self.threads} threads")
        if self.stages == 1 or self.stages < 0:
            raise ValueError(f"TileShape.stages must be 0 (register pipeline) or >= 2 (ring); got {self.stages}")
        smem = self.ring_bytes + self.reduction_bytes
        if smem > SM90_MAX_SMEM_PER_CTA:
            raise ValueError(f"TileShape: ring ({self.ring_bytes} bytes: stages x 2 nt x threads x 16) plus split-K "
                             f"buffer ({self.reduction_bytes}) exceed the {SM90_MAX_SMEM_PER_CTA} bytes of shared "
                             f"memory a CTA can have; use fewer stages, tiles per warp or warps")
        if self.max_ctas_per_sm:
            self.launch_smem_bytes()
        return self

    @property
    def reduction_bytes(self) -> int:
        """The epilogue's split-K buffer (one fp32 per lane, accumulator and warp)."""
        return 0 if self.warps_k == 1 else 4 * 32 * self.nt * self.mt * 4 * self.warps_n * self.warps_k

    @staticmethod
    def cap_smem_bytes(max_ctas_per_sm: int) -> int:
        """Dynamic shared memory per CTA that lets ``max_ctas_per_sm`` CTAs onto an SM but not one more: with the
        driver's per-CTA reservation on top, one more CTA than the cap overflows the SM, the cap's CTAs fit."""
        return SM90_SMEM_PER_SM // (max_ctas_per_sm + 1)

    def launch_smem_bytes(self) -> int | None:
        """Dynamic shared memory to ask for at launch: None (what the kernel allocates) unless ``max_ctas_per_sm``
        caps the CTAs per SM."""
        if not self.max_ctas_per_sm:
            return None
        cap = self.cap_smem_bytes(self.max_ctas_per_sm)
        if self.ring_bytes + self.reduction_bytes > cap:
            raise ValueError(f"max_ctas_per_sm={self.max_ctas_per_sm}: the tile's own shared memory "
                             f"({self.ring_bytes + self.reduction_bytes} bytes) already exceeds the cap's {cap}")
        return cap


@dataclass(frozen=True)
class StepOperands:
    """Register buffers of one K step's non-weight operands: x words, group scales (f32), zero points (u32)."""

    x_words: int
    params: int
    zeros: bool

    def buffers(self) -> dict:
        buf = {}
        if self.x_words:
            buf["x"] = cute.make_rmem_tensor((self.x_words,), Uint32)
        if self.params:
            buf["s"] = cute.make_rmem_tensor((self.params,), Float32)
            if self.zeros:
                buf["z"] = cute.make_rmem_tensor((self.params,), Uint32)
        return buf

    @staticmethod
    def advance(cur: dict, nxt: dict) -> None:
        for name, t in cur.items():
            t.store(nxt[name].load())


def promotes_scales(fmt: WeightFormat, has_scales: bool, group: int) -> bool:
    """Whether group scales can move from the decoded weights onto the fp32 partial sums: every K step of the kernel
    (four 16-byte vectors of a row, ``4 * values_per_vector`` values, 128 at 4 bits) must lie inside one group,
    because one MMA sums K positions of the four threads of a quad - four vectors of the step. Where it is *used*
    (a measured choice) is the host's: ``quantized_mm.use_promoted_scales``."""
    return has_scales and group % (4 * fmt.values_per_vector) == 0


class WeightOnlyGemm:
    """One specialization of the template: a weight format, an activation dtype, an output dtype, a tile shape.

    ``scale_dtype``: dtype of the per-(row, group) scale tensor, or None when there is none (per-tensor scale only).
    ``promote_scales``: apply the group scales to each K step's fp32 partial sums rather than to the decoded weights
    (valid only where ``promotes_scales`` says so; the host decides per call, as the group size is a runtime value).
    """

    def __init__(self, fmt: WeightFormat, x_dtype, out_dtype, scale_dtype, tile: TileShape,
                 promote_scales: bool = False, pdl: bool = True):
        if fmt.has_zeros and scale_dtype is None:
            raise ValueError(f"format {fmt.name} needs group scales")
        if promote_scales and scale_dtype is None:
            raise ValueError("promote_scales needs group scales")
        if fmt.zero_by_mma and not promote_scales:
            raise ValueError(f"format {fmt.name} needs promote_scales (its MMAs sum unscaled u - z)")
        if tile.param_words and not (fmt.takes_param_words and promote_scales):
            raise ValueError(f"TileShape.param_words needs a format with parameter words and promoted scales "
                             f"(awq_zmma); got {fmt.name}")
        self.promote = promote_scales
        self.pdl = pdl  # programmatic dependent launch (griddepcontrol: SM90 and later; config.tile_for_arch)
        self.fmt = fmt
        self.act = activation_operand(x_dtype)
        self.out_dtype = out_dtype
        self.scale_dtype = scale_dtype
        self.tile = tile

    # ------------------------------------------------------------------------------------------------ host side
    @cute.jit
    def __call__(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor, scale: Float32, group_scales, zeros,
                 group: Int32, stream, bias=None):
        tile = self.tile
        grid_n = (self.weight_rows(w, out) + tile.rows_per_cta - 1) // tile.rows_per_cta
        grid_m = (x.shape[0] + tile.tokens_per_cta - 1) // tile.tokens_per_cta
        # Programmatic dependent launch (SM90, ``pdl``): the grid may be scheduled while the previous kernel on the
        # stream drains (its launch latency hides behind that kernel's tail); the kernel waits for it before touching
        # memory.
        grid = [grid_m, grid_n, 1] if const_expr(tile.token_major) else [grid_n, grid_m, 1]
        # the kernel divides by the group size through its multiplier (group_of)
        self.kernel(x, w, out, scale, group_scales, zeros, group_multiplier(group), bias).launch(
            grid=grid, block=[tile.threads, 1, 1], stream=stream, use_pdl=self.pdl, smem=tile.launch_smem_bytes(),
            min_blocks_per_mp=tile.min_ctas_hint)

    # ---------------------------------------------------------------------------------------------- device side
    @cute.kernel
    def kernel(self, x: cute.Tensor, w: cute.Tensor, out: cute.Tensor, scale: Float32, group_scales, zeros,
               group_mul: Int32, bias):
        tile = self.tile
        nt, mt, wk_count = tile.nt, tile.mt, tile.warps_k
        tidx, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bx, by, _ = cute.arch.block_idx()
        if const_expr(tile.token_major):
            bx, by = by, bx  # bx: row block, by: token tile, whatever the launch order
        g = lane // 4
        t = lane % 4
        wn = warp % tile.warps_n
        wk = warp // tile.warps_n
        n0 = bx * tile.rows_per_cta + wn * (16 * nt)
        m0 = by * tile.tokens_per_cta
        row_bytes = w.shape[1]
        prefetch_last = const_expr(tile.prefetch_last and tile.preload_weights)
        if const_expr(tile.l2_prefetch_mb > 0 and not prefetch_last):
            self.prefetch_rows_l2(w, bx, tidx)
        wbuf = cute.make_rmem_tensor((tile.vectors * 4,), Uint32)
        slot0 = None
        ops = self.step_operands()
        cur = ops.buffers()
        nxt = ops.buffers() if const_expr(tile.x_ahead) else cur
        # The register pipeline with x_ahead preloads its first step's group parameters too (they are the weight's).
        params_first = const_expr(tile.preload_weights and tile.stages == 0 and tile.x_ahead)
        if const_expr(tile.preload_weights):
            slot0 = self.ring_slot(tidx)
            # The weight's first K steps are loaded before the wait (``TileShape.preload_weights``): back to back,
            # they arrive during the previous call's tail. Only for weights no programmatically launching kernel
            # writes (configs.WEIGHT_PRELOAD's contract); x still waits.
            th = self.thread_setup(x, w, n0, m0, g, t, self.true_rows(out))
            self.first_weight_loads(th, wbuf, slot0, wk, t, row_bytes)
            if params_first:
                self.load_step_params(th, cur, wk, t, group_scales, zeros, group_mul)
            if const_expr(tile.l2_prefetch_mb > 0 and prefetch_last):
                self.prefetch_rows_l2(w, bx, tidx)
        # Otherwise nothing in global memory is read before the previous grid on the stream has completed (any
        # input, weights included, may be its output). Our dependents may launch at once: they wait the same way.
        if const_expr(self.pdl):
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        if const_expr(not tile.preload_weights):
            th = self.thread_setup(x, w, n0, m0, g, t, self.true_rows(out))

        acc = cute.make_rmem_tensor((tile.acc_chains * nt * mt * 4,), Float32)
        acc.fill(0.0)
        n_steps = self.k_steps(w)
        if const_expr(params_first):
            self.load_step_x(x, th, cur, wk, t)
        elif const_expr(tile.x_ahead):
            self.load_step_operands(x, th, cur, wk, t, group_scales, zeros, group_mul)
        if const_expr(not tile.preload_weights):
            slot0 = self.ring_slot(tidx)
            self.first_weight_loads(th, wbuf, slot0, wk, t, row_bytes)
        self.loop_prologue(x, th)
        if const_expr(tile.stages == 0 and tile.swap_registers):
            # Register double buffer, unrolled by two so that the buffers swap roles instead of being copied: a
            # copy of the next step's registers waits for their load to land, so the step after it could not issue
            # its own load until then (ncu, H200, 4-bit M = 1: 52% of the stall samples on that copy). Here step
            # s + 2's load is issued as soon as step s's registers are decoded, before step s + 1 waits for its own.
            w_next = cute.make_rmem_tensor((tile.vectors * 4,), Uint32)
            n_mine = (n_steps - wk + wk_count - 1) // wk_count  # this warp's K steps: wk, wk + wk_count, ...
            for i in cutlass.range(0, n_mine // 2, 1, unroll=1):
                step = wk + 2 * i * wk_count
                self.load_weights(th, w_next, step + wk_count, t, row_bytes)
                if const_expr(tile.x_ahead):
                    self.load_step_operands(x, th, nxt, step + wk_count, t, group_scales, zeros, group_mul)
                else:
                    self.load_step_operands(x, th, cur, step, t, group_scales, zeros, group_mul)
                self.mma_step(x, th, wbuf, cur, acc, step, t)
                self.load_weights(th, wbuf, step + 2 * wk_count, t, row_bytes)
                if const_expr(tile.x_ahead):
                    self.load_step_operands(x, th, cur, step + 2 * wk_count, t, group_scales, zeros, group_mul)
                else:
                    self.load_step_operands(x, th, nxt, step + wk_count, t, group_scales, zeros, group_mul)
                self.mma_step(x, th, w_next, nxt, acc, step + wk_count, t)
            for _ in cutlass.range(n_mine % 2, unroll=1):  # an odd count: its last step is in wbuf / cur
                step = wk + (n_mine - 1) * wk_count
                if const_expr(not tile.x_ahead):
                    self.load_step_operands(x, th, cur, step, t, group_scales, zeros, group_mul)
                self.mma_step(x, th, wbuf, cur, acc, step, t)
        elif const_expr(tile.stages == 0):
            # Register double buffer with a copy: fewer live registers in the unrolled body (the 32-token
            # tensor-core tiles spill with the swapping loop above).
            w_next = cute.make_rmem_tensor((tile.vectors * 4,), Uint32)
            for step in cutlass.range(wk, n_steps, wk_count, unroll=1):
                self.load_weights(th, w_next, step + wk_count, t, row_bytes)
                self.load_step_operands(x, th, nxt, step + wk_count if const_expr(tile.x_ahead) else step, t,
                                        group_scales, zeros, group_mul)
                self.mma_step(x, th, wbuf, cur, acc, step, t)
                wbuf.store(w_next.load())
                if const_expr(tile.x_ahead):
                    ops.advance(cur, nxt)
        else:
            n_iter = (n_steps - wk + wk_count - 1) // wk_count
            for i in cutlass.range(0, n_iter, 1, unroll=1):
                step = wk + i * wk_count
                self.load_step_operands(x, th, nxt, step + wk_count if const_expr(tile.x_ahead) else step, t,
                                        group_scales, zeros, group_mul)
                ptx.cp_async_wait(tile.stages - 2)  # this thread's step i has landed
                self.read_ring(wbuf, slot0, i % tile.stages)
                # Refill the slot read one iteration ago with the step stages - 1 ahead.
                ahead = i + tile.stages - 1
                self.issue_weights(th, slot0, ahead % tile.stages, wk + ahead * wk_count, t, row_bytes)
                ptx.cp_async_commit()
                self.mma_step(x, th, wbuf, cur, acc, step, t)
                if const_expr(tile.x_ahead):
                    ops.advance(cur, nxt)
            ptx.cp_async_wait(0)  # nothing may land in shared memory after the CTA's last use of it

        self.drain()
        for c in range_constexpr(1, tile.acc_chains):  # fold the extra accumulator chains into the first
            for e in range_constexpr(nt * mt * 4):
                acc[e] = acc[e] + acc[c * nt * mt * 4 + e]
        self.epilogue(acc, out, scale, n0, m0, g, t, lane, wn, wk, bias)

    def loop_prologue(self, x: cute.Tensor, th):
        """Hook right before the K loop, with the first weight loads in flight (``BlobDecodeGemm`` stages x)."""

    def drain(self):
        """Hook before the epilogue: asynchronous copies a subclass still has in flight must land first."""

    def weight_rows(self, w: cute.Tensor, out: cute.Tensor):
        """N, the weight rows the grid covers (``BlobDecodeGemm`` reads it from out: its weight is in blocks)."""
        return w.shape[0]

    def true_rows(self, out: cute.Tensor):
        """N for the clamps of the scale / zero-point rows: in fragment order w's rows are padded to 16."""
        return out.shape[1] if const_expr(self.tile.fragment_order) else None

    @property
    def step_bytes(self) -> int:
        """Bytes between a thread's vectors of consecutive K steps: 64 along a row, 1 KB in fragment order."""
        return 1024 if self.tile.fragment_order else 64

    def k_steps(self, w: cute.Tensor):
        """K steps of the loop: 64 bytes of each weight row per step."""
        return (w.shape[1] + 63) // 64

    def ring_slot(self, tidx):
        """With a cp.async ring (``stages`` > 0): allocate it and return this thread's vector 0 of stage 0."""
        if self.tile.stages == 0:
            return None
        smem = cutlass.memory.SmemAllocator()
        ring = smem.allocate_tensor(Uint32, cute.make_layout(self.tile.ring_bytes // 4), byte_alignment=16)
        return Int32(ring.iterator.toint()) + tidx * 16

    def first_weight_loads(self, th, wbuf: cute.Tensor, slot0, wk, t: Int32, row_bytes):
        """The loads that start this warp's weight stream: its first K step into the register buffer, or its first
        ``stages - 1`` K steps into the cp.async ring."""
        tile = self.tile
        if tile.stages == 0:
            # ptxas sinks read-only (.nc) loads below griddepcontrol.wait, so a preload through them would not be
            # one (SASS: no LDG before ACQBULK); plain loads stay where they are (the CPU tests pin it).
            self.load_weights(th, wbuf, wk, t, row_bytes, coherent=tile.preload_weights)
        else:
            for i in range(tile.stages - 1):
                self.issue_weights(th, slot0, i, wk + i * tile.warps_k, t, row_bytes)
                ptx.cp_async_commit()

    def prefetch_rows_l2(self, w: cute.Tensor, bx, tidx):
        """Bulk L2 prefetches of this CTA's weight rows, one per row, spread over the warps (lane j of a warp takes
        its j-th row: ptxas issues the uniform-datapath prefetch once per active lane). Only the leading
        ``budget / N`` bytes of each row when the whole weight exceeds ``tile.l2_prefetch_mb``, so that what is
        prefetched stays resident until it is read."""
        tile = self.tile
        warps = tile.threads // 32
        rows_per_warp = (tile.rows_per_cta + warps - 1) // warps
        span = cutlass.min(w.shape[1], Int32(tile.l2_prefetch_mb << 20) // w.shape[0]) // 16 * 16
        lane, warp = tidx % 32, tidx // 32
        for i in range((rows_per_warp + 31) // 32):
            r = warp * rows_per_warp + lane + 32 * i
            row = bx * tile.rows_per_cta + r
            live = (lane + 32 * i < rows_per_warp) & (r < tile.rows_per_cta) & (row < w.shape[0]) & (span > 0)
            if const_expr(tile.fragment_order):
                # A 16-row tile's first span / 64 K steps are its first 16 * span bytes: one span-sized piece each.
                addr = w.iterator.toint() + Int64(row // 16) * (16 * w.stride[0]) + Int64((row % 16) * span)
            else:
                addr = w.iterator.toint() + Int64(row) * w.stride[0]
            ptx.prefetch_l2_bulk(addr, span, live)

    def thread_setup(self, x: cute.Tensor, w: cute.Tensor, n0, m0, g, t, n_rows=None):
        """Loop-invariant per-thread addressing: row base addresses of the weights and activations it reads.

        Weight rows past N are clamped to the last one (in fragment order: 16-row tiles past the last to the last,
        whose rows are padded; the scale / zero-point rows to the true N, ``n_rows``): they load real data whose
        results land in accumulators that are never stored, so the weight loads need only the K predicate. Tokens
        past M are predicated off instead of clamped: with M < 8 most lanes would otherwise issue (redundant)
        activation loads, which cost LSU throughput - measured 10-24% slower at M = 1..4 for 1-bit weights, whose
        activation bytes dwarf the weight bytes.
        """
        tile, act = self.tile, self.act
        rows = []
        for j in range(tile.nt):
            for r in range(2):
                rows.append(cutlass.min(n0 + 16 * j + 8 * r + g, (w.shape[0] if n_rows is None else n_rows) - 1))
        if const_expr(tile.fragment_order):
            # Tile j's step 0 is the 1 KB at its start: rows g (r = 0) then g + 8 (r = 1), 16 bytes per lane.
            w_rows = []
            for j in range(tile.nt):
                tj = cutlass.min((n0 + 16 * j) // 16, w.shape[0] // 16 - 1)
                for r in range(2):
                    w_rows.append(w.iterator.toint() + Int64(tj) * (16 * w.stride[0])
                                  + Int64(r * 512 + (g * 4 + t) * 16))
        else:
            w_rows = [w.iterator.toint() + Int64(row) * w.stride[0] + Int64(t * 16) for row in rows]
        vpv = self.fmt.values_per_vector
        x_rows, x_live = [], []
        for i in range(tile.mt):
            m = m0 + 8 * i + g
            x_rows.append(x.iterator.toint() + (Int64(m) * x.stride[0] + Int64(t * vpv)) * act.bytes_per_value)
            x_live.append(m < x.shape[0])
        return {"rows": rows, "w_rows": w_rows, "x_rows": x_rows, "x_live": x_live}

    def load_weights(self, th, buf: cute.Tensor, step: Int32, t: Int32, row_bytes, coherent: bool = False):
        """Registers <- this thread's 16-byte vectors of K step ``step`` (stale past K: see ptx.ld_global).
        ``coherent``: plain loads instead of the read-only path (the preload: see ``first_weight_loads``)."""
        in_k = step * 64 + t * 16 < row_bytes
        off = Int64(step * self.step_bytes)
        for r in range(self.tile.row_slots):
            words = ptx.ld_global(th["w_rows"][r] + off, in_k, 4, streaming=True, zero_fill=False,
                                  read_only=not coherent)
            for i in range(4):
                buf[r * 4 + i] = words[i]

    def issue_weights(self, th, slot0, stage, step, t: Int32, row_bytes):
        """cp.async this thread's vectors of K step ``step`` into ring stage ``stage`` (zeros past K)."""
        in_k = step * 64 + t * 16 < row_bytes
        off = Int64(step * self.step_bytes)
        stage_base = slot0 + stage * (self.tile.vectors * self.tile.threads * 16)
        for r in range(self.tile.row_slots):
            ptx.cp_async_16(stage_base, th["w_rows"][r] + off, in_k, offset=r * self.tile.threads * 16)

    def read_ring(self, buf: cute.Tensor, slot0, stage):
        stage_base = slot0 + stage * (self.tile.vectors * self.tile.threads * 16)
        for v in range(self.tile.vectors):
            words = ptx.ld_shared_v4(stage_base, offset=v * self.tile.threads * 16)
            for i in range(4):
                buf[v * 4 + i] = words[i]

    def step_operands(self) -> "StepOperands":
        fmt, act, tile = self.fmt, self.act, self.tile
        return StepOperands(x_words=tile.mt * act.words_per_run(fmt.values_per_vector) if tile.x_ahead else 0,
                            params=self.blocks * tile.row_slots if self.scale_dtype is not None else 0,
                            zeros=fmt.has_zeros)

    @property
    def blocks(self) -> int:
        """32-value blocks of a 16-byte vector: one decode context (group scale, zero point) each. With promoted
        scales the whole step lies in one group: one context."""
        return 1 if self.promote else max(1, self.fmt.values_per_vector // 32)

    def load_step_operands(self, x: cute.Tensor, th, buf, step, t: Int32, group_scales, zeros,
                           group_mul: Int32):
        """Registers <- what K step ``step`` needs besides the weights: with group scales, the (row, 32-value block)
        scales and zero points; with ``x_ahead``, this thread's K run of x for each of its token tiles (zeros past K
        or M). Without ``x_ahead`` the MMA loop loads each word's x run just before its MMAs instead (``x_run``):
        fewer live registers, which the 32-token tensor-core tiles need."""
        if const_expr(self.tile.x_ahead):
            self.load_step_x(x, th, buf, step, t)
        self.load_step_params(th, buf, step, t, group_scales, zeros, group_mul)

    def load_step_x(self, x: cute.Tensor, th, buf, step, t: Int32):
        """``x_ahead``'s registers <- this thread's K run of x of step ``step`` for each of its token tiles."""
        run = self.act.words_per_run(self.fmt.values_per_vector)  # a multiple of 4: 32 to 512 bytes
        for i in range(self.tile.mt):
            for v in range(0, run, 4):
                words = self.x_run(x, th, step, t, i, 4 * v, 4)
                for j in range(4):
                    buf["x"][i * run + v + j] = words[j]

    def load_step_params(self, th, buf, step, t: Int32, group_scales, zeros, group_mul: Int32):
        """Registers <- the group scales and zero points of K step ``step``'s (row, 32-value block)s, if any."""
        fmt, tile = self.fmt, self.tile
        vpv = fmt.values_per_vector
        k_chunk = step * (4 * vpv) + t * vpv  # this thread's K run of the step
        if const_expr(tile.param_words):  # one word per row: the promoted scale and the format's corrections
            gi = cutlass.min(group_of(k_chunk, group_mul), group_scales.shape[1] - 1)
            for r in range(tile.row_slots):
                word = ptx.ld_global(group_scales.iterator.toint() + (Int64(th["rows"][r]) * group_scales.stride[0]
                                                                      + Int64(gi)) * 4, True, 1, streaming=False,
                                     read_only=False)[0]  # plain: stays above the wait as a preload (load_weights)
                buf["z"][r] = word
                buf["s"][r] = fmt.param_word_scale(self.act.compute, word)
        elif self.scale_dtype is not None:
            for blk in range(self.blocks):
                # Groups are >= 32 values and 32-aligned, and a word holds <= 32 values: one context per block.
                gi = cutlass.min(group_of(k_chunk + 32 * blk, group_mul), group_scales.shape[1] - 1)  # past K: x is 0
                for r in range(tile.row_slots):
                    row = th["rows"][r]
                    buf["s"][blk * tile.row_slots + r] = group_scales[row, gi].to(Float32)
                    if fmt.has_zeros:
                        buf["z"][blk * tile.row_slots + r] = Uint32(zeros[row, gi])

    def x_run(self, x: cute.Tensor, th, step, t: Int32, i: int, first_byte: int, nwords: int) -> list:
        """``nwords`` words of token tile i's x run of K step ``step``, from byte ``first_byte`` of the run."""
        vpv, bpv = self.fmt.values_per_vector, self.act.bytes_per_value
        pred = (step * (4 * vpv) + t * vpv < x.shape[1]) & th["x_live"][i]
        x_off = Int64(step * (4 * vpv * bpv))
        return ptx.ld_global(th["x_rows"][i] + x_off, pred, nwords, streaming=False, offset=first_byte)

    def group_contexts(self, buf, blk: int) -> list:
        fmt, ct, tile = self.fmt, self.act.compute, self.tile
        if self.scale_dtype is None:
            return [None] * tile.row_slots
        base = blk * tile.row_slots
        if const_expr(tile.param_words):
            return [(fmt.param_word_ctx(ct, buf["z"][base + r], tile.fields_in_place), None)
                    for r in range(tile.row_slots)]
        # Promoted scales are applied to the partial sums (mma_step): the decode sees only the zero point.
        return [fmt.group_ctx(ct, None if self.promote else buf["s"][base + r],
                              buf["z"][base + r] if fmt.has_zeros else None, tile.fields_in_place)
                for r in range(tile.row_slots)]

    def mma_step(self, x: cute.Tensor, th, wbuf: cute.Tensor, buf, acc: cute.Tensor, step, t: Int32):
        """Decode one K step of this thread's weight vectors and accumulate its MMAs."""
        fmt, act, tile = self.fmt, self.act, self.tile
        ct = act.compute
        nt, mt = tile.nt, tile.mt
        vpw = fmt.values_per_word
        run = act.words_per_run(fmt.values_per_vector)
        wrun = act.words_per_run(vpw)
        words_per_block = 4 // self.blocks
        # Promoted scales: this step's MMAs of tile (j, i) accumulate into part[(j, i)] (from zero), added to acc
        # at the row's scale once the step is done.
        part = {}
        for blk in range(self.blocks):
            ctx = self.group_contexts(buf, blk)
            for wb in range(words_per_block):
                wi = blk * words_per_block + wb
                if const_expr(tile.x_ahead):
                    xw = [[buf["x"][i * run + wi * wrun + j] for j in range(wrun)] for i in range(mt)]
                else:
                    xw = [sum((self.x_run(x, th, step, t, i, 4 * (wi * wrun + v), min(4, wrun))
                               for v in range(0, wrun, 4)), []) for i in range(mt)]
                wp = [fmt.prepare_word(wbuf[r * 4 + wi], ct) for r in range(tile.row_slots)]
                for q2 in range(vpw // 4):  # one MMA per two pairs of the word
                    p0, p1 = fmt.pair_elems(2 * q2), fmt.pair_elems(2 * q2 + 1)
                    b = [(act.pair(xw[i], *p0), act.pair(xw[i], *p1)) for i in range(mt)]
                    for j in range(nt):
                        r0, r1 = 2 * j, 2 * j + 1  # rows g and g + 8 of tile j
                        quad = ((2 * q2, r0), (2 * q2, r1), (2 * q2 + 1, r0), (2 * q2 + 1, r1))  # (pair, row)
                        a = [fmt.decode_pair(wp[r], q, ct, ctx[r], tile.fields_in_place) for q, r in quad]
                        if const_expr(fmt.zero_by_mma):  # -(M_j + z) of the same four (pair, row)s
                            a_corr = [fmt.correction(q, ct, ctx[r], tile.fields_in_place) for q, r in quad]
                        for i in range(mt):
                            base = (j * mt + i) * 4
                            for p in range(act.parts):
                                if const_expr(fmt.zero_by_mma):
                                    # The correction right behind its main MMA, in the same accumulator, keeps the
                                    # running sum near sum (u - z) x; 2 * acc_chains such chains a step (ILP).
                                    key = (j, i, (2 * wi + q2) % (2 * tile.acc_chains))
                                    c = part.get(key, [Float32(0.0)] * 4)
                                    bb = [b[i][0][p], b[i][1][p]]
                                    part[key] = ptx.mma_m16n8k16(ct.name, a_corr, bb,
                                                                 ptx.mma_m16n8k16(ct.name, a, bb, c))
                                elif const_expr(self.promote):
                                    c = part.get((j, i), [Float32(0.0)] * 4)
                                    part[(j, i)] = ptx.mma_m16n8k16(ct.name, a, [b[i][0][p], b[i][1][p]], c)
                                else:
                                    chain = (2 * wi + q2) % tile.acc_chains  # alternate over the step's MMAs
                                    at = base + chain * nt * mt * 4
                                    c = [acc[at + e] for e in range(4)]
                                    d = ptx.mma_m16n8k16(ct.name, a, [b[i][0][p], b[i][1][p]], c)
                                    for e in range(4):
                                        acc[at + e] = d[e]
        if const_expr(self.promote):
            sums = {}
            for (j, i, *_), d in part.items():  # zero_by_mma's two chains of a tile add up first
                sums[(j, i)] = [x + y for x, y in zip(sums[(j, i)], d)] if (j, i) in sums else d
            for (j, i), d in sums.items():
                base = (j * mt + i) * 4
                for e in range(4):  # C slots 0, 1: row g of tile j; 2, 3: row g + 8
                    acc[base + e] = acc[base + e] + d[e] * buf["s"][2 * j + e // 2]

    @cute.jit
    def epilogue(self, acc: cute.Tensor, out: cute.Tensor, scale: Float32, n0: Int32, m0: Int32, g: Int32,
                 t: Int32, lane: Int32, wn: Int32, wk: Int32, bias):
        tile = self.tile
        n_acc = tile.nt * tile.mt * 4
        if const_expr(tile.warps_k == 1):
            for e in range_constexpr(n_acc):
                self.store(out, acc[e], e, scale, n0, m0, g, t, bias)
        else:
            smem = cutlass.memory.SmemAllocator()
            # lane-fastest so a warp's 32 stores / loads of one accumulator hit 32 banks
            red = smem.allocate_tensor(Float32, cute.make_layout((32, n_acc, tile.warps_n, tile.warps_k)),
                                       byte_alignment=16)
            for e in range_constexpr(n_acc):
                red[lane, e, wn, wk] = acc[e]
            cute.arch.sync_threads()
            # Every warp reduces and stores an interleaved share of the accumulators.
            for el in range_constexpr((n_acc + tile.warps_k - 1) // tile.warps_k):
                e = el * tile.warps_k + wk
                if e < n_acc:
                    total = red[lane, e, wn, 0]
                    for kk in range_constexpr(1, tile.warps_k):
                        total = total + red[lane, e, wn, kk]
                    self.store(out, total, e, scale, n0, m0, g, t, bias)

    @cute.jit
    def store(self, out: cute.Tensor, v: Float32, e, scale: Float32, n0: Int32, m0: Int32, g: Int32, t: Int32, bias):
        """Accumulator e = ((j * mt + i) * 4 + c) of this thread -> out[m, n] (C fragment slot c of tile (j, i)),
        ``* scale`` and ``+ bias[n]`` (a vector in out's dtype, when given) in fp32, rounded once."""
        c = e % 4
        ji = e // 4
        i = ji % self.tile.mt
        j = ji // self.tile.mt
        n = n0 + 16 * j + g + 8 * (c // 2)
        m = m0 + 8 * i + 2 * t + (c % 2)
        if m < out.shape[0] and n < out.shape[1]:
            if const_expr(bias is None):
                out[m, n] = (v * scale).to(self.out_dtype)
            else:
                out[m, n] = (v * scale + bias[n].to(Float32)).to(self.out_dtype)
