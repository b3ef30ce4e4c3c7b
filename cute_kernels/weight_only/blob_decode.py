"""BlobDecodeGemm: the decode tiles of the weight-only template, reading the WGMMA path's weight blob.

What it computes
    The same as ``WeightOnlyGemm`` (kernel.py) for 4-bit formats with group parameters (AWQ):
    out[m, n] = scale * sum_k x[m, k] * w(n, k), fp32 accumulation, w decoded in registers.

Why a second reader of the blob
    On SM90 an AWQ layer runs two kernels: these decode tiles at a few tokens and the WGMMA path above them. Each
    wanted the weight in its own order (the K-packed repack here, the blob there), so a layer held the checkpoint
    and two derived copies. The blob's order is mma.sync's too: a warp's slice of WGMMA's register A fragment for a
    16-row, 64-K tile is exactly the A fragments of ``mma.sync.m16n8k16`` for its four k-blocks. So these tiles can
    read the blob and the WGMMA path's parameter words, and a layer needs no repack (``config.AWQ_ONE_COPY``).

Layouts (the host's ``wgmma.blob_from_codes`` / ``wgmma.param_words``)
    w       int64 [ceil(N / 64), K-tiles * 256]: per 64-row block and 64-value K-tile, 2 KB: thread slot
            16 * (row / 16 % 4) + lane of the block holds, in 4 words, its A fragment (rows g, g + 8 of its 16-row
            tile; word kb = k-block kb, pair p of a word = register p of that k-block). Padding codes are 0.
    params  int32 [groups * W, N]: the format's W decode-context words of (row n, group) at [group * W + i, n].
    x       [M, K] fp16 / bf16, K contiguous, 16-byte aligned rows; out [M, N].
    Groups must not split a K-tile (G a multiple of 64, or one group): a vector then has one context per row.

Data path (per warp, g = lane / 4, t = lane % 4)
    A K step of the template's loop is two K-tiles: per 16-row tile a thread loads one 16-byte vector of each (rows
    g and g + 8 together), where the K-packed reader loaded 16 bytes of row g and of row g + 8. The fragment is in
    natural K order, so each thread needs x pairs 16 kb + 2t (+ 8): every fourth 4-byte word, which plain loads
    fetch one at a time (session 41: 1.04-1.31x the repack reader's time). Instead x goes through shared memory and
    ldmatrix hands out the B fragments (``x_stage``): ``step`` copies each K step's rows one step ahead (cp.async,
    two slots per warp), ``whole`` copies the CTA's rows of all of K once before the loop (one token, K small enough).
    The decode contexts come ready-made from the parameter words; with ``promote_scales`` the zero point is removed
    in the decode and the scale multiplies each K-tile's fp32 partial sums. The register double buffer of the
    weights, the split of K over the warps of a CTA, the in-CTA reduction and the epilogue are the template's.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint32, const_expr

from . import ptx
from .formats import WeightFormat
from .kernel import StepOperands, TileShape, WeightOnlyGemm, group_of

BLOCK_ROWS = 64  # rows of one blob block (the WGMMA path's warpgroup)
K_TILE = 64  # K values of one blob K-tile
K_TILE_BYTES = 2048  # one 64 x 64 block of 4-bit codes: 128 threads x 16 bytes
WARP_SLICE_BYTES = 512  # a 16-row tile's share of a block's K-tile
STEP_VALUES = 2 * K_TILE  # K values of one step of the template's loop


def supports(group: int, k: int) -> bool:
    """Whether a group size keeps each K-tile inside one group (one decode context per row and vector)."""
    return group % K_TILE == 0 or group >= k


class BlobDecodeGemm(WeightOnlyGemm):
    """One specialization: a 4-bit format with ``context_words``, x dtype, out dtype, a decode tile (register double
    buffer, ``x_ahead``), promoted scales or not, whether K is a whole number of K-tiles (``full_k_tiles``), how x is
    staged (``x_stage``, ``x_rows`` tokens), and whether a K step lies in one group (``group_per_step``: one set of
    parameter words per step)."""

    X_WHOLE_BYTES = 64 * 1024  # x_stage "whole": x_rows x K (rounded up to a step) values must fit (the host checks)

    def __init__(self, fmt: WeightFormat, x_dtype, out_dtype, tile: TileShape, promote_scales: bool = False,
                 full_k_tiles: bool = True, x_stage: str = "step", group_per_step: bool = False, x_rows: int = 8):
        if fmt.bits != 4:
            raise ValueError(f"BlobDecodeGemm reads 4-bit blobs; format {fmt.name} has {fmt.bits} bits")
        if (tile.stages != 0 or not tile.x_ahead or tile.swap_registers or tile.fields_in_place
                or tile.preload_weights):
            raise ValueError(f"BlobDecodeGemm runs the register pipeline with x_ahead only, without preload; "
                             f"got {tile}")
        if x_stage not in ("step", "whole") or (x_stage == "whole" and tile.mt != 1):
            raise ValueError(f"x_stage must be 'step' or 'whole' (whole: one token tile); got {x_stage!r}")
        super().__init__(fmt, x_dtype, out_dtype, Float32, tile, promote_scales)
        self.words_per_group = fmt.context_word_count(True)
        self.full_k_tiles = full_k_tiles
        self.x_stage = x_stage
        self.x_rows = min(x_rows, 8 * tile.mt)
        self.group_per_step = group_per_step
        if tile.max_ctas_per_sm and self.smem_bytes > tile.cap_smem_bytes(tile.max_ctas_per_sm):
            raise ValueError(f"max_ctas_per_sm={tile.max_ctas_per_sm}: the x buffers and split-K buffer "
                             f"({self.smem_bytes} bytes) exceed the cap's {tile.cap_smem_bytes(tile.max_ctas_per_sm)}")

    @property
    def x_slot_bytes(self) -> int:
        """x_stage "step": one K step of x for the tile's tokens, 8 mt rows of 128 values."""
        return 8 * self.tile.mt * STEP_VALUES * self.act.bytes_per_value

    @property
    def smem_bytes(self) -> int:
        """Shared memory the kernel allocates: the x buffer(s) and the epilogue's split-K buffer."""
        x = self.X_WHOLE_BYTES if self.x_stage == "whole" else 2 * self.x_slot_bytes * self.tile.threads // 32
        return x + self.tile.reduction_bytes

    # ------------------------------------------------------------------------- the template's hooks: the weights
    def weight_rows(self, w: cute.Tensor, out: cute.Tensor):
        return out.shape[1]  # the blob is in 64-row blocks: the grid covers out's N

    def k_steps(self, w: cute.Tensor):
        return (w.shape[1] // (K_TILE_BYTES // 8) + 1) // 2

    def prefetch_rows_l2(self, w: cute.Tensor, bx, tidx):
        """Bulk L2 prefetch of the leading bytes of this CTA's blob blocks (budget / blocks each), split in 32 chunks
        over the first warp. CTAs narrower than a block take their share of it: together they cover it."""
        tile = self.tile
        rows = tile.rows_per_cta
        parts = max(1, BLOCK_ROWS // rows)
        span = cutlass.min(w.shape[1] * 8, Int32(tile.l2_prefetch_mb << 20) // w.shape[0]) // 16 * 16
        share = span // parts // 16 * 16  # bulk prefetches take 16-byte aligned addresses and sizes
        chunk = share // 32 // 16 * 16
        for b in range(max(1, rows // BLOCK_ROWS)):
            first_row = bx * rows + b * BLOCK_ROWS
            rb = first_row // BLOCK_ROWS
            q = (first_row % BLOCK_ROWS) // rows if const_expr(parts > 1) else 0
            addr = w.iterator.toint() + Int64(rb) * w.stride[0] * 8 + Int64(q * share + tidx * chunk)
            ptx.prefetch_l2_bulk(addr, chunk, (tidx < 32) & (chunk > 0) & (rb < w.shape[0]))

    def thread_setup(self, x: cute.Tensor, w: cute.Tensor, n0, m0, g, t, n_rows=None):
        """Per-thread addressing: this thread's 16 bytes of K-tile 0 for each 16-row tile (tiles past the blob's
        last block clamped to it: their results are never stored), the parameter rows (clamped to N - 1 at the
        loads), and the x staging (``x_stage_setup``)."""
        lane = g * 4 + t
        tiles16 = w.shape[0] * (BLOCK_ROWS // 16)
        w_tiles, rows = [], []
        for j in range(self.tile.nt):
            r16 = cutlass.min((n0 + 16 * j) // 16, tiles16 - 1)
            w_tiles.append(w.iterator.toint() + Int64(r16 // 4) * w.stride[0] * 8
                           + Int64((r16 % 4) * WARP_SLICE_BYTES + lane * 16))
            for r in range(2):
                rows.append(n0 + 16 * j + 8 * r + g)
        th = {"rows": rows, "w_tiles": w_tiles, "k_tiles": w.shape[1] // (K_TILE_BYTES // 8)}
        th.update(self.x_stage_setup(x, m0))
        return th

    def load_weights(self, th, buf: cute.Tensor, step: Int32, t: Int32, row_bytes, coherent: bool = False):
        """Registers <- the 16-byte vectors of K-tiles 2 step and 2 step + 1 of each 16-row tile (vector 2 j + r)."""
        for j in range(self.tile.nt):
            for r in range(2):
                kt = 2 * step + r
                words = ptx.ld_global(th["w_tiles"][j] + Int64(kt) * K_TILE_BYTES, kt < th["k_tiles"], 4,
                                      streaming=True, zero_fill=False, read_only=not coherent)
                for i in range(4):
                    buf[(2 * j + r) * 4 + i] = words[i]

    # ----------------------------------------------------------------------------------- x through shared memory
    def x_stage_setup(self, x: cute.Tensor, m0):
        """Allocate the x buffer and precompute addresses. Chunk c (16 bytes) of token row r is stored at chunk
        c ^ (r % 8) of its row, so the 8 rows an ldmatrix matrix reads fall in 8 bank groups. ldmatrix: lane 8 j + r
        gives row r of matrix j; rows past the staged ones read the last staged row (finite data whose columns are
        never stored). Copies of tokens past M (and K) write zeros and read nothing."""
        tidx, _, _ = cute.arch.thread_idx()
        lane, warp = tidx % 32, tidx // 32
        bpv = self.act.bytes_per_value
        smem = cutlass.memory.SmemAllocator()
        r, j = lane % 8, lane // 8
        if const_expr(self.x_stage == "whole"):
            buf = smem.allocate_tensor(Uint32, cute.make_layout(self.X_WHOLE_BYTES // 4), byte_alignment=128)
            row_bytes = (x.shape[1] + STEP_VALUES - 1) // STEP_VALUES * STEP_VALUES * bpv  # zeros to a whole step
            row_bytes = cutlass.min(row_bytes, Int32(self.X_WHOLE_BYTES // self.x_rows))  # in bounds if misused
            row = cutlass.min(r, self.x_rows - 1)
            return {"xw_base": Int32(buf.iterator.toint()), "xw_row_bytes": row_bytes, "m0": m0, "ld_row": row,
                    "ld_addr": Int32(buf.iterator.toint()) + row * row_bytes, "ld_j": j}
        buf = smem.allocate_tensor(Uint32, cute.make_layout(2 * self.x_slot_bytes * self.tile.threads // 32 // 4),
                                   byte_alignment=128)
        chunk = lane % 16
        src, live, dst = [], [], []
        for q in range((16 * self.x_rows + 31) // 32):  # chunk c = lane + 32 q of the step: row c // 16, c % 16
            row = lane // 16 + 2 * q
            src.append(x.iterator.toint() + (Int64(m0 + row) * x.stride[0] + Int64(chunk * 8)) * bpv)
            live.append((m0 + row < x.shape[0]) & (row < self.x_rows))
            dst.append(row * (STEP_VALUES * bpv) + ((chunk ^ (row % 8)) * 16))
        ld_rows = [cutlass.min(i * 8 + r, self.x_rows - 1) * (STEP_VALUES * bpv) for i in range(self.tile.mt)]
        return {"xs": Int32(buf.iterator.toint()) + warp * (2 * self.x_slot_bytes), "xs_src": src, "xs_live": live,
                "xs_dst": dst, "xs_chunk": chunk, "ld_rows": ld_rows, "ld_r": r, "ld_j": j}

    @cute.jit
    def loop_prologue(self, x: cute.Tensor, th):
        """x_stage "whole": copy the CTA's x rows (zeros past K and M), then a CTA barrier."""
        if const_expr(self.x_stage == "whole"):
            tidx, _, _ = cute.arch.thread_idx()
            bpv = self.act.bytes_per_value
            chunks = th["xw_row_bytes"] // 16
            for r in range(self.x_rows):
                m = th["m0"] + r
                src = x.iterator.toint() + Int64(m) * x.stride[0] * bpv
                dst = th["xw_base"] + r * th["xw_row_bytes"]
                for c in cutlass.range(tidx, chunks, self.tile.threads, unroll=1):
                    ptx.cp_async_16(dst + ((c ^ r) * 16), src + Int64(c * 16),
                                    (m < x.shape[0]) & (c * 8 < x.shape[1]), l1=True)
            ptx.cp_async_commit()
            ptx.cp_async_wait(0)
            cute.arch.sync_threads()

    def x_slot(self, th, step):
        """x_stage "step": shared address of K step ``step``'s slot (this warp's steps alternate between two)."""
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wk = warp // self.tile.warps_n
        return th["xs"] + ((step - wk) // self.tile.warps_k % 2) * self.x_slot_bytes

    def stage_x(self, x: cute.Tensor, th, step):
        """cp.async K step ``step``'s x rows into its slot (after the warp's reads of the slot two steps back)."""
        cute.arch.sync_warp()
        slot = self.x_slot(th, step)
        in_k = step * STEP_VALUES + th["xs_chunk"] * 8 < x.shape[1]
        step_bytes = Int64(step * (STEP_VALUES * self.act.bytes_per_value))
        for q in range(len(th["xs_src"])):
            ptx.cp_async_16(slot + th["xs_dst"][q], th["xs_src"][q] + step_bytes, in_k & th["xs_live"][q], l1=True)
        ptx.cp_async_commit()

    def read_x(self, th, step) -> list:
        """K step ``step``'s B fragment words: token tile i, K-tile r, k-block kb, half h at 16 i + 8 r + 2 kb + h
        (x_stage "step" waits for this step's copies first)."""
        xw = [None] * (16 * self.tile.mt)
        if const_expr(self.x_stage == "whole"):
            addr, rows, swz = th["ld_addr"], [0], th["ld_row"]
        else:
            ptx.cp_async_wait(1)
            cute.arch.sync_warp()
            addr, rows, swz = self.x_slot(th, step), th["ld_rows"], th["ld_r"]
        base = step * 16 if const_expr(self.x_stage == "whole") else 0  # the step's first chunk of the row
        for i in range(len(rows)):
            for r in range(2):
                for h in range(2):
                    chunk = base + 8 * r + 4 * h + th["ld_j"]
                    regs = ptx.ldmatrix_x4(addr + rows[i] + ((chunk ^ swz) * 16))
                    for jj in range(4):  # matrix jj = chunk 8 r + 4 h + jj: k-block 2 h + jj // 2, half jj % 2
                        xw[16 * i + 8 * r + 2 * (2 * h + jj // 2) + jj % 2] = regs[jj]
        return xw

    def drain(self):
        """No copy may land in shared memory after the loop (the epilogue's reduction buffer)."""
        if const_expr(self.x_stage == "step"):
            ptx.cp_async_wait(0)

    # ------------------------------------------------------------------------------ parameters, decode and MMAs
    def step_operands(self):
        return _BlobStepOperands(params=self.tile.nt * 2 * 2 * self.words_per_group)

    def load_step_operands(self, x: cute.Tensor, th, buf, step, t: Int32, params, zeros, group_mul: Int32):
        """Stage K step ``step``'s x (x_stage "step") and load its parameter words into registers: per vector
        v = 2 j + r and row slot rr, W words at (2 v + rr) W (only K-tile 2 step's with ``group_per_step``)."""
        if const_expr(self.x_stage == "step"):
            self.stage_x(x, th, step)
        wpg = self.words_per_group
        groups = params.shape[0] // wpg
        n_last = params.shape[1] - 1
        for j in range(self.tile.nt):
            for r in range(1 if const_expr(self.group_per_step) else 2):
                gi = cutlass.min(group_of((2 * step + r) * K_TILE, group_mul), groups - 1)
                for rr in range(2):
                    row = cutlass.min(th["rows"][2 * j + rr], n_last)
                    for i in range(wpg):
                        buf["p"][((2 * j + r) * 2 + rr) * wpg + i] = Uint32(params[gi * wpg + i, row])

    def mma_step(self, x: cute.Tensor, th, wbuf: cute.Tensor, buf, acc: cute.Tensor, step, t: Int32):
        """Decode both K-tiles of the step and accumulate their MMAs (4 k-blocks each)."""
        fmt, tile = self.fmt, self.tile
        ct = self.act.compute
        wpg = self.words_per_group
        xw = self.read_x(th, step)
        for r in range(2):
            for j in range(tile.nt):
                v = 2 * j + r
                pv = 2 * j if const_expr(self.group_per_step) else v  # group_per_step: K-tile 2 step's words
                ctx, scale32 = [], []
                for rr in range(2):
                    words = [buf["p"][(pv * 2 + rr) * wpg + i] for i in range(wpg)]
                    c = fmt.group_ctx_words(ct, words)
                    if const_expr(self.promote):
                        scale32.append(_low_half_f32(ct.name, words[0]))
                        c = (c[0], None)  # the decode removes the zero point only
                    ctx.append(c)
                prepared = [fmt.prepare_word(wbuf[v * 4 + kb], ct) for kb in range(4)]
                part = {}
                for kb in range(4):
                    a = [fmt.decode_pair(prepared[kb], p, ct, ctx[p % 2]) for p in range(4)]
                    for i in range(tile.mt):
                        b = [xw[16 * i + 8 * r + 2 * kb], xw[16 * i + 8 * r + 2 * kb + 1]]
                        base = (j * tile.mt + i) * 4
                        if const_expr(self.promote):
                            part[i] = ptx.mma_m16n8k16(ct.name, a, b, part.get(i, [Float32(0.0)] * 4))
                        else:
                            d = ptx.mma_m16n8k16(ct.name, a, b, [acc[base + e] for e in range(4)])
                            for e in range(4):
                                acc[base + e] = d[e]
                if const_expr(self.promote):
                    for i, d in part.items():
                        base = (j * tile.mt + i) * 4
                        for e in range(4):  # C slots 0, 1: row g; 2, 3: row g + 8
                            acc[base + e] = acc[base + e] + d[e] * scale32[e // 2]


def _low_half_f32(ct_name: str, word):
    """The 16-bit value in the low half of a parameter word (x's dtype), as f32 (exact)."""
    if ct_name == "f16":
        return ptx.f16x2_to_f32(word)[0]
    return ptx.f32_from_bits(Uint32(word) << 16)


@dataclass(frozen=True)
class _BlobStepOperands:
    """Register buffer of one K step's parameter words (``StepOperands``' interface; x is in shared memory)."""

    params: int

    def buffers(self) -> dict:
        return {"p": cute.make_rmem_tensor((self.params,), Uint32)}

    advance = staticmethod(StepOperands.advance)
