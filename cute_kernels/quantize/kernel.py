"""ActivationQuantize: per-token int8 (symmetric or with a zero point) / per-token-group or per-token FP8
quantization of fp16 / bf16 activations, in one pass.

What it computes (bit for bit the torch references ``formats.int8.quantize_int8_rowwise``,
``formats.int8.quantize_int8_rowwise_asymmetric``, ``formats.fp8.quantize_fp8_per_token_group`` and
``formats.fp8.quantize_fp8_rowwise``)
    For every group of values - a whole row (int8, and FP8 with ``per_token``) or 128 consecutive values of a row (FP8
    e4m3, the DeepSeek-V3 1 x 128 groups):
        scale = max(amax(|x|), 1e-10) * fp32(1 / QMAX)   (QMAX = 127 or 448; amax propagates NaN)
        q     = int8: round-half-even(x / scale) clamped to +-127;  e4m3: cvt.rn.satfinite(x / scale)
    With a zero point (``zero_point``, int8 rows only; vLLM's asymmetric activations):
        lo, hi = min(min(x), 0), max(max(x), 0)   (the range always holds 0: formats/int8.py says why)
        scale  = max(hi - lo, 1e-10) * fp32(1 / 255)
        azp    = cvt.rni.s32.f32(-128 - lo / scale)   (saturating, NaN -> 0)
        q      = clamp(cvt.rni.s32.f32(x / scale) + azp, -128, 127)
    The divisions are IEEE (``div.rn``), as torch's are, and the scale the same product with the rounded reciprocal
    as the references (torch's CUDA division by a scalar): the results are the references', not an approximation.

Layouts (dynamic M, K; K a multiple of 16 (int8) or 128 (FP8))
    x      [M, K] fp16 / bf16, K contiguous, row stride a multiple of 8, 16-byte aligned (K a multiple of 16 for whole
           rows, of 128 for FP8 groups)
    q      [M, K] int8 / float8_e4m3fn, contiguous
    scale  int8 and per-token FP8: float32 [M]; FP8 groups: float32 [M, K / 128], MN-major with column stride ``ld`` (the TMA-aligned layout
           ``fp8_blockwise_scaled_mm`` stages) - passed as its flat storage plus ``ld``
    azp    int32 [M] (the zero-point variant, whose entry point ``with_zero_point`` takes it instead of ``ld``)

Launch
    With programmatic dependent launch (``pdl``, the default): the kernel waits for the previous grid before reading x
    and lets its dependent (the GEMM) launch at once, so the GEMM's weight loads overlap the quantization.

Work split
    A thread owns 16 consecutive values: two 16-byte loads, one 16-byte store of the codes.
    * FP8 (groups of 128): 8 lanes per group, a group's amax in three butterfly shuffles; the 256-thread CTAs tile
      the M x K/128 groups, one group per 8 threads, no loop.
    * whole rows (int8, per-token FP8): one CTA per row; a first pass over the row reduces the amax (warp shuffles, then the 8 warps
      through shared memory), a second pass re-reads the row (from L1 / L2) and stores the codes. The zero-point
      variant reduces min and max instead, the same way, and thread 0 also stores the row's azp.

The zero point is a trace-time choice (its own entry points, ``with_zero_point`` / ``kernel_with_zero_point``), and so
is ``per_token`` for FP8 (the int8 row pass storing e4m3 codes): each specialization traces only its own code, and
the older ones exactly what they traced before these existed.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint32, const_expr, range_constexpr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from ..weight_only import ptx

THREADS = 256
VALUES = 16  # per thread and pass: 2 x 16-byte loads of fp16 / bf16, one 16-byte store of 8-bit codes
GROUP = 128  # FP8 group along K
LANES_PER_GROUP = GROUP // VALUES
EPS = 1e-10
WARPS = THREADS // 32


@dsl_user_op
def _asm_f32(asm: str, *args, loc=None, ip=None) -> Float32:
    cons = "=f" + ",f" * len(args)
    return Float32(llvm.inline_asm(T.f32(), [Float32(a).ir_value(loc=loc, ip=ip) for a in args], asm, cons,
                                   has_side_effects=False, is_align_stack=False))


def div_rn(a, b) -> Float32:
    """IEEE division (what torch computes); the DSL's ``/`` may lower to an approximate one."""
    return _asm_f32("div.rn.f32 $0, $1, $2;", a, b)


def abs_max(a, b) -> Float32:
    """max(a, |b|), NaN-propagating like torch's amax."""
    return _asm_f32("{.reg .f32 t; abs.f32 t, $2; max.NaN.f32 $0, $1, t;}", a, b)


def mul_rn(a, b) -> Float32:
    return _asm_f32("mul.rn.f32 $0, $1, $2;", a, b)


def max_nan(a, b) -> Float32:
    return _asm_f32("max.NaN.f32 $0, $1, $2;", a, b)


def min_nan(a, b) -> Float32:
    return _asm_f32("min.NaN.f32 $0, $1, $2;", a, b)


def sub_rn(a, b) -> Float32:
    """a - b, rounded once (never contracted into an FMA), as torch computes it."""
    return _asm_f32("sub.rn.f32 $0, $1, $2;", a, b)


@dsl_user_op
def f32_to_s32(a, loc=None, ip=None) -> Int32:
    """Round half to even to int32, saturated to the int32 range, NaN -> 0 (``cvt.rni.s32.f32``)."""
    return Int32(llvm.inline_asm(T.i32(), [Float32(a).ir_value(loc=loc, ip=ip)], "cvt.rni.s32.f32 $0, $1;", "=r,f",
                                 has_side_effects=False, is_align_stack=False))


@dsl_user_op
def _pack4(asm: str, v, *ints, loc=None, ip=None) -> Uint32:
    """Four f32 (``$1``..``$4``) and any 32-bit integers (``$5``..) -> one 32-bit register."""
    operands = [Float32(a).ir_value(loc=loc, ip=ip) for a in v] + [Int32(i).ir_value(loc=loc, ip=ip) for i in ints]
    return Uint32(llvm.inline_asm(T.i32(), operands, asm, "=r,f,f,f,f" + ",r" * len(ints),
                                  has_side_effects=False, is_align_stack=False))


def e4m3x4(v) -> Uint32:
    """Four f32 -> four e4m3 bytes (v[0] in the low byte), round to nearest, saturated to +-448."""
    return _pack4("{.reg .b16 l, h; cvt.rn.satfinite.e4m3x2.f32 l, $2, $1; cvt.rn.satfinite.e4m3x2.f32 h, $4, $3;"
                  " mov.b32 $0, {l, h};}", v)


def s8x4(v) -> Uint32:
    """Four f32 -> four int8 bytes (v[0] in the low byte): round half to even, clamped to +-127."""
    return _pack4("{.reg .s32 a, b, c, d; .reg .b32 lo, hi;"
                  " cvt.rni.s32.f32 a, $1; cvt.rni.s32.f32 b, $2; cvt.rni.s32.f32 c, $3; cvt.rni.s32.f32 d, $4;"
                  " min.s32 a, a, 127; min.s32 b, b, 127; min.s32 c, c, 127; min.s32 d, d, 127;"
                  " max.s32 a, a, -127; max.s32 b, b, -127; max.s32 c, c, -127; max.s32 d, d, -127;"
                  " prmt.b32 lo, a, b, 0x0040; prmt.b32 hi, c, d, 0x0040; prmt.b32 $0, lo, hi, 0x5410;}", v)


def s8x4_zero_point(v, azp) -> Uint32:
    """Four f32 -> four int8 bytes (v[0] in the low byte): round half to even to int32, plus ``azp``, clamped to
    -128..127 - vLLM's order: the zero point is added to the rounded integer. A plain add: the range holds 0, so
    |azp| <= 128 and |round(x / scale)| <= 255 (formats/int8.py, "Bounds"); it cannot wrap."""
    return _pack4("{.reg .s32 a, b, c, d; .reg .b32 lo, hi;"
                  " cvt.rni.s32.f32 a, $1; cvt.rni.s32.f32 b, $2; cvt.rni.s32.f32 c, $3; cvt.rni.s32.f32 d, $4;"
                  " add.s32 a, a, $5; add.s32 b, b, $5; add.s32 c, c, $5; add.s32 d, d, $5;"
                  " min.s32 a, a, 127; min.s32 b, b, 127; min.s32 c, c, 127; min.s32 d, d, 127;"
                  " max.s32 a, a, -128; max.s32 b, b, -128; max.s32 c, c, -128; max.s32 d, d, -128;"
                  " prmt.b32 lo, a, b, 0x0040; prmt.b32 hi, c, d, 0x0040; prmt.b32 $0, lo, hi, 0x5410;}", v, azp)


def scale_and_zero_point(lo, hi) -> tuple:
    """A row's reduced (min, max) -> (scale f32, azp s32), the formulas of the module docstring."""
    lo_, hi_ = min_nan(lo, Float32(0.0)), max_nan(hi, Float32(0.0))
    s = mul_rn(max_nan(sub_rn(hi_, lo_), Float32(EPS)), Float32(1.0 / 255.0))
    return s, f32_to_s32(sub_rn(Float32(-128.0), div_rn(lo_, s)))


class ActivationQuantize:
    """One specialization: ``in_dtype`` cutlass Float16 / BFloat16, ``fp8`` (e4m3 codes; groups of 128, or whole rows
    with ``per_token``) or not (rows -> int8), and for int8 rows ``zero_point`` (asymmetric codes with a per-row azp;
    entry point ``with_zero_point``)."""

    def __init__(self, in_dtype, fp8: bool, pdl: bool = True, zero_point: bool = False, per_token: bool = False):
        if fp8 and zero_point:
            raise ValueError("the zero point is an int8 (whole-row) variant; FP8 codes are symmetric")
        if per_token and not fp8:
            raise ValueError("per_token selects whole rows for FP8; int8 is always per token")
        self.pdl = pdl
        self.bf16 = in_dtype is cutlass.BFloat16
        self.fp8 = fp8
        self.groups = fp8 and not per_token  # FP8's 1 x 128 groups; else one scale per row
        self.zero_point = zero_point
        self.rcp_qmax = 1.0 / (448.0 if fp8 else 127.0)  # rounded to fp32 where it is used, as torch does

    # ------------------------------------------------------------------------------------------------ host side
    @cute.jit
    def __call__(self, x: cute.Tensor, q: cute.Tensor, scale: cute.Tensor, ld: Int32, stream):
        if const_expr(self.groups):
            threads = x.shape[0] * (x.shape[1] // GROUP) * LANES_PER_GROUP
            grid = (threads + THREADS - 1) // THREADS
        else:
            grid = x.shape[0]
        self.kernel(x, q, scale, ld).launch(grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream,
                                            use_pdl=self.pdl)

    @cute.jit
    def with_zero_point(self, x: cute.Tensor, q: cute.Tensor, scale: cute.Tensor, azp: cute.Tensor, stream):
        """The ``zero_point`` specialization's entry: one CTA per row, ``azp`` int32 [M] written with ``scale``."""
        self.kernel_with_zero_point(x, q, scale, azp).launch(grid=[x.shape[0], 1, 1], block=[THREADS, 1, 1],
                                                             stream=stream, use_pdl=self.pdl)

    # ---------------------------------------------------------------------------------------------- device side
    @cute.kernel
    def kernel(self, x: cute.Tensor, q: cute.Tensor, scale: cute.Tensor, ld: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        if const_expr(self.pdl):
            # Programmatic dependent launch both ways: x may be the previous kernel's output, so wait for it; the
            # GEMM that consumes q may launch at once and load its weights while this kernel runs (it waits for
            # this grid's completion before reading q and the scales).
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        if const_expr(self.groups):
            self.group_of_128(x, q, scale, ld, bidx * THREADS + tidx)
        else:
            self.whole_row(x, q, scale, bidx, tidx)

    @cute.kernel
    def kernel_with_zero_point(self, x: cute.Tensor, q: cute.Tensor, scale: cute.Tensor, azp: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        if const_expr(self.pdl):  # as in ``kernel``
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        self.whole_row_with_zero_point(x, q, scale, azp, bidx, tidx)

    @cute.jit
    def group_of_128(self, x: cute.Tensor, q: cute.Tensor, scale: cute.Tensor, ld: Int32, t: Int32):
        groups_per_row = x.shape[1] // GROUP
        g = t // LANES_PER_GROUP
        m = g // groups_per_row
        kb = g - m * groups_per_row
        live = m < x.shape[0]
        col = kb * GROUP + (t % LANES_PER_GROUP) * VALUES
        v = self.load16(x, m, col, live)
        amax = Float32(0.0)
        for e in range_constexpr(VALUES):
            amax = abs_max(amax, v[e])
        for offset in (1, 2, 4):  # the group's 8 lanes are aligned in the warp
            amax = max_nan(amax, cute.arch.shuffle_sync_bfly(amax, offset))
        s = mul_rn(max_nan(amax, Float32(EPS)), Float32(self.rcp_qmax))
        self.store16(q, m, col, v, s, live)
        if live:
            if t % LANES_PER_GROUP == 0:
                scale[Int32(kb) * ld + m] = s

    @cute.jit
    def whole_row(self, x: cute.Tensor, q: cute.Tensor, scale: cute.Tensor, m: Int32, tidx: Int32):
        k = x.shape[1]
        amax = Float32(0.0)
        for col in cutlass.range(tidx * VALUES, k, THREADS * VALUES, unroll=1):
            v = self.load16(x, m, col, Boolean(True))
            for e in range_constexpr(VALUES):
                amax = abs_max(amax, v[e])
        (amax,) = self.block_reduce(tidx, [amax], [max_nan])
        s = mul_rn(max_nan(amax, Float32(EPS)), Float32(self.rcp_qmax))
        for col in cutlass.range(tidx * VALUES, k, THREADS * VALUES, unroll=1):
            self.store16(q, m, col, self.load16(x, m, col, Boolean(True)), s, Boolean(True))
        if tidx == 0:
            scale[m] = s

    @cute.jit
    def block_reduce(self, tidx: Int32, values: list, ops: list) -> list:
        """Each of this thread's partial ``values`` reduced over the CTA with its op (``max_nan`` / ``min_nan``, which
        propagate NaN): butterfly shuffles in the warp, then the warps' results through shared memory."""
        n = len(values)
        for offset in (1, 2, 4, 8, 16):
            values = [op(v, cute.arch.shuffle_sync_bfly(v, offset)) for v, op in zip(values, ops)]
        smem = cutlass.memory.SmemAllocator()
        partial = smem.allocate_tensor(Float32, cute.make_layout(WARPS * n))  # [value * WARPS + warp]
        if tidx % 32 == 0:
            for i in range_constexpr(n):
                partial[i * WARPS + tidx // 32] = values[i]
        cute.arch.sync_threads()
        values = [partial[i * WARPS] for i in range(n)]
        for w in range_constexpr(1, WARPS):
            values = [op(v, partial[i * WARPS + w]) for i, (v, op) in enumerate(zip(values, ops))]
        return values

    @cute.jit
    def whole_row_with_zero_point(self, x: cute.Tensor, q: cute.Tensor, scale: cute.Tensor, azp: cute.Tensor,
                                  m: Int32, tidx: Int32):
        """``whole_row`` reducing the row's min and max (threads past K keep +inf / -inf, which every value beats)
        and storing asymmetric codes and the zero point."""
        k = x.shape[1]
        lo, hi = Float32(math.inf), Float32(-math.inf)
        for col in cutlass.range(tidx * VALUES, k, THREADS * VALUES, unroll=1):
            v = self.load16(x, m, col, Boolean(True))
            for e in range_constexpr(VALUES):
                lo = min_nan(lo, v[e])
                hi = max_nan(hi, v[e])
        lo, hi = self.block_reduce(tidx, [lo, hi], [min_nan, max_nan])
        s, zp = scale_and_zero_point(lo, hi)
        for col in cutlass.range(tidx * VALUES, k, THREADS * VALUES, unroll=1):
            self.store16(q, m, col, self.load16(x, m, col, Boolean(True)), s, Boolean(True), zp)
        if tidx == 0:
            scale[m] = s
            azp[m] = zp

    # ----------------------------------------------------------------------------------------- per-thread pieces
    def load16(self, x, m, col, live) -> list:
        """x[m, col .. col + 15] as 16 f32 (zeros when not ``live``)."""
        addr = x.iterator.toint() + (Int64(m) * x.stride[0] + Int64(col)) * 2
        words = ptx.ld_global(addr, live, 4, streaming=False) + ptx.ld_global(addr, live, 4, streaming=False,
                                                                              offset=16)
        out = []
        for w in words:
            if const_expr(self.bf16):  # a bf16 is the high half of its f32
                out += [ptx.f32_from_bits(ptx.shl(w, 16)), ptx.f32_from_bits(ptx.lop3(w, 0xFFFF0000, 0, 0xEA))]
            else:
                out += list(ptx.f16x2_to_f32(w))
        return out

    def store16(self, q, m, col, v, s, live, zero_point=None) -> None:
        """The codes of ``v`` for ``scale`` s (and the row's ``zero_point`` in the zero-point variant), one 16-byte
        store."""
        if const_expr(zero_point is not None):
            codes = [s8x4_zero_point([div_rn(v[4 * i + e], s) for e in range(4)], zero_point) for i in range(4)]
        else:
            pack = e4m3x4 if const_expr(self.fp8) else s8x4
            codes = [pack([div_rn(v[4 * i + e], s) for e in range(4)]) for i in range(4)]
        addr = q.iterator.toint() + Int64(m) * q.stride[0] + Int64(col)
        ptx.st_global_v4(addr, codes, live)
