"""The few PTX instructions the weight-only kernels need that CuTe DSL 4.8.1 has no pure op for.

Every helper is an ``llvm.inline_asm`` with ``has_side_effects=False``: they are pure value computations (or loads of
memory the kernel never writes), so LLVM may CSE, hoist and dead-code-eliminate them. ``cute.arch.prmt``/``lop3``
emit effectful asm, which pins them in program order; that matters in a decode loop of a few thousand instructions.

Loads take a raw global address (``Int64``) and a predicate: a false predicate leaves the destination registers zero
and touches no memory, so out-of-range rows / K chunks need neither clamping nor branches.
"""

from __future__ import annotations

from cutlass import Boolean, Float32, Int32, Int64, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

# PTX lop3 truth tables (a = 0xF0, b = 0xCC, c = 0xAA).
LUT_AND_XOR = 0x6A  # (a & b) ^ c
LUT_AND_OR = 0xEA  # (a & b) | c


def _ir(values, kind, loc, ip):
    return [kind(v).ir_value(loc=loc, ip=ip) for v in values]


def _struct(n: int, elem):
    return llvm.StructType.get_literal([elem] * n)


@dsl_user_op
def asm_u32(ptx: str, *args, loc=None, ip=None) -> Uint32:
    """One 32-bit result from ``ptx`` with operands $1.. (all 32-bit registers)."""
    cons = "=r" + ",r" * len(args)
    return Uint32(llvm.inline_asm(T.i32(), _ir(args, Uint32, loc, ip), ptx, cons,
                                  has_side_effects=False, is_align_stack=False))


def lop3(a, b: int, c: int, lut: int) -> Uint32:
    """``lop3.b32 d, a, b, c, lut`` with compile-time b and c."""
    return asm_u32(f"lop3.b32 $0, $1, {b & 0xFFFFFFFF:#010x}, {c & 0xFFFFFFFF:#010x}, {lut:#04x};", a)


def lop3_rrc(a, b, c: int, lut: int) -> Uint32:
    """``lop3.b32 d, a, b, c, lut`` with a register b and a compile-time c."""
    return asm_u32(f"lop3.b32 $0, $1, $2, {c & 0xFFFFFFFF:#010x}, {lut:#04x};", a, b)


def shr(a, n: int) -> Uint32:
    """Logical right shift (SHF). Tried and rejected: ``mul.hi.u32`` by 2^(32-n), which moves the shift to the FMA
    pipe as IMAD.HI - the 2-bit decode (7 shifts per word) got 24% slower with it (docs/weight_only.md)."""
    return a if n == 0 else asm_u32(f"shr.b32 $0, $1, {n};", a)


def shl(a, n: int) -> Uint32:
    return a if n == 0 else asm_u32(f"shl.b32 $0, $1, {n};", a)


def prmt(a, b, selector: int) -> Uint32:
    """Bytes of ``{b, a}`` (a = bytes 0-3, b = bytes 4-7) picked by the four selector nibbles."""
    return asm_u32(f"prmt.b32 $0, $1, $2, {selector:#06x};", a, b)


def prmt_c(a, b: int, selector: int) -> Uint32:
    """``prmt`` with a compile-time b (e.g. a magic exponent byte)."""
    return asm_u32(f"prmt.b32 $0, $1, {b & 0xFFFFFFFF:#010x}, {selector:#06x};", a)


def fma_x2(ty: str, a, b, c) -> Uint32:
    """Packed ``fma.rn.{f16x2,bf16x2} d, a, b, c`` on 32-bit registers (one rounding)."""
    return asm_u32(f"fma.rn.{ty} $0, $1, $2, $3;", a, b, c)


def fma_x2_cc(ty: str, a, b: int, c: int) -> Uint32:
    """Packed fma with compile-time b and c (bit patterns)."""
    return asm_u32(f"{{.reg .b32 tb, tc; mov.b32 tb, {b & 0xFFFFFFFF:#010x}; mov.b32 tc, {c & 0xFFFFFFFF:#010x};"
                   f" fma.rn.{ty} $0, $1, tb, tc;}}", a)


def fma_x2_rc(ty: str, a, b, c: int) -> Uint32:
    """Packed fma with a register b and a compile-time c."""
    return asm_u32(f"{{.reg .b32 tc; mov.b32 tc, {c & 0xFFFFFFFF:#010x}; fma.rn.{ty} $0, $1, $2, tc;}}", a, b)


def fma_x2_cr(ty: str, a, b: int, c) -> Uint32:
    """Packed fma with a compile-time b and a register c."""
    return asm_u32(f"{{.reg .b32 tb; mov.b32 tb, {b & 0xFFFFFFFF:#010x}; fma.rn.{ty} $0, $1, tb, $2;}}", a, c)


@dsl_user_op
def cvt_pair_f32(ty: str, hi, lo, loc=None, ip=None) -> Uint32:
    """Two f32 -> one packed {f16,bf16}x2 register (``lo`` in the low half), round to nearest."""
    return Uint32(llvm.inline_asm(T.i32(), _ir((hi, lo), Float32, loc, ip), f"cvt.rn.{ty}.f32 $0, $1, $2;",
                                  "=r,f,f", has_side_effects=False, is_align_stack=False))


@dsl_user_op
def f32_from_bits(v, loc=None, ip=None) -> Float32:
    return Float32(llvm.inline_asm(T.f32(), _ir((v,), Uint32, loc, ip), "mov.b32 $0, $1;", "=f,r",
                                   has_side_effects=False, is_align_stack=False))


@dsl_user_op
def split_bf16_pair(x_lo, x_hi, loc=None, ip=None):
    """fp32 pair -> (hi, lo) bf16x2 registers with x ~= hi + lo to ~2^-16 relative (two-term bf16 split).

    Feeding both through the MMA against the same weight fragment gives an fp32 activation ~fp32 accuracy on bf16
    tensor cores: the weight codes are exact in bf16, so the only rounding left is the residual's.
    """
    res = llvm.inline_asm(
        _struct(2, T.i32()), _ir((x_lo, x_hi), Float32, loc, ip),
        "{.reg .b32 h, tl, th; .reg .f32 fl, fh;\n"
        " cvt.rn.bf16x2.f32 h, $3, $2;\n"
        " shl.b32 tl, h, 16; and.b32 th, h, 0xffff0000;\n"
        " mov.b32 fl, tl; mov.b32 fh, th;\n"
        " sub.f32 fl, $2, fl; sub.f32 fh, $3, fh;\n"
        " cvt.rn.bf16x2.f32 $1, fh, fl;\n"
        " mov.b32 $0, h;}",
        "=r,=r,f,f", has_side_effects=False, is_align_stack=False)
    return (Uint32(llvm.extractvalue(T.i32(), res, [0], loc=loc, ip=ip)),
            Uint32(llvm.extractvalue(T.i32(), res, [1], loc=loc, ip=ip)))


@dsl_user_op
def ld_global(addr, pred, nwords: int, streaming: bool, zero_fill: bool = True, offset: int = 0,
              read_only: bool = True, loc=None, ip=None) -> list:
    """Predicated (vector) load of ``nwords`` (1, 2 or 4) 32-bit words from global address ``addr + offset``.

    ``pred`` is a Boolean bound straight to a PTX predicate register (constraint "b"), so loads that share it share
    one ISETP; ``offset`` is a compile-time immediate folded into the address operand. When ``pred`` is false no
    memory is touched and the words are zero (``zero_fill``) or stale.
    ``streaming``: the weights are read exactly once, so they bypass L1 allocation (``L1::no_allocate``) and leave
    it to the activations, which every warp of the SM re-reads. Both use the read-only (``.nc``) path: the kernel
    never writes its inputs. ``read_only=False``: a plain (coherent) load, which ptxas keeps in program order
    relative to ``griddepcontrol.wait`` (it sinks ``.nc`` loads below it).
    """
    assert nwords in (1, 2, 4)
    outs = ",".join(f"${i}" for i in range(nwords))
    zero = " ".join(f"mov.b32 ${i}, 0;" for i in range(nwords)) if zero_fill else ""
    hint = ".L1::no_allocate" if streaming else ""
    vec, regs = (f".v{nwords}", f"{{{outs}}}") if nwords > 1 else ("", "$0")
    nc = ".nc" if read_only else ""
    ptx = (f"{{{zero}\n @${nwords + 1} ld.global{nc}{hint}{vec}.u32 {regs}, [${nwords}+{offset}];}}")
    cons = ",".join(["=r"] * nwords) + ",l,b"
    res = llvm.inline_asm(_struct(nwords, T.i32()),
                          [Int64(addr).ir_value(loc=loc, ip=ip), Boolean(pred).ir_value(loc=loc, ip=ip)],
                          ptx, cons, has_side_effects=False, is_align_stack=False)
    return [Uint32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(nwords)]


@dsl_user_op
def mma_m16n8k16(ab_type: str, a, b, c, loc=None, ip=None) -> list:
    """``mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32``: 4 A regs, 2 B regs, 4 f32 accumulators in and out.

    Fragment slots (PTX ISA, g = lane / 4, t = lane % 4): A regs (row g, k 2t..2t+1), (row g+8, k 2t..),
    (row g, k 2t+8..), (row g+8, k 2t+8..); B regs (k 2t..2t+1, col g), (k 2t+8.., col g); C (row g, col 2t..2t+1),
    (row g+8, col 2t..2t+1). The low half of each packed register is the lower k.
    """
    res = llvm.inline_asm(
        _struct(4, T.f32()), _ir(a, Uint32, loc, ip) + _ir(b, Uint32, loc, ip) + _ir(c, Float32, loc, ip),
        f"mma.sync.aligned.m16n8k16.row.col.f32.{ab_type}.{ab_type}.f32 "
        "{$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
        "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", has_side_effects=False, is_align_stack=False)
    return [Float32(llvm.extractvalue(T.f32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


def splat_u16(v) -> Uint32:
    """Low 16 bits copied into both halves."""
    return prmt(v, v, 0x1010)


def xor_c(a, c: int) -> Uint32:
    return asm_u32(f"xor.b32 $0, $1, {c & 0xFFFFFFFF:#010x};", a)


def splat_or(v, c: int) -> Uint32:
    """``(v * 0x00010001) | c``: a small integer copied into both halves, then OR-ed with a constant pattern."""
    return asm_u32(f"{{.reg .b32 t; mul.lo.u32 t, $1, 0x00010001; or.b32 $0, t, {c & 0xFFFFFFFF:#010x};}}", v)


@dsl_user_op
def st_global_v4(addr, words, pred, loc=None, ip=None) -> None:
    """Predicated 16-byte store of four 32-bit words."""
    llvm.inline_asm(None, [Int64(addr).ir_value(loc=loc, ip=ip)] + _ir(words, Uint32, loc, ip)
                    + [Int32(pred).ir_value(loc=loc, ip=ip)],
                    "{.reg .pred p; setp.ne.b32 p, $5, 0; @p st.global.v4.u32 [$0], {$1,$2,$3,$4};}",
                    "l,r,r,r,r,r", has_side_effects=True, is_align_stack=False)


@dsl_user_op
def cp_async_16(smem_addr, gmem_addr, pred, offset: int = 0, l1: bool = False, loc=None, ip=None) -> None:
    """``cp.async.cg`` of 16 bytes global -> shared (L2 only; ``l1``: ``.ca``, through L1, for data every warp of
    the SM re-reads); when ``pred`` is false it reads nothing and writes zeros (src-size 0). ``offset``: compile-time
    byte offset added to the shared address."""
    op = "ca" if l1 else "cg"
    llvm.inline_asm(None, [Int32(smem_addr).ir_value(loc=loc, ip=ip), Int64(gmem_addr).ir_value(loc=loc, ip=ip),
                           Boolean(pred).ir_value(loc=loc, ip=ip)],
                    f"{{.reg .u32 n; selp.u32 n, 16, 0, $2; cp.async.{op}.shared.global [$0+{offset}], [$1], 16, n;}}",
                    "r,l,b", has_side_effects=True, is_align_stack=False)


@dsl_user_op
def cp_async_commit(loc=None, ip=None) -> None:
    llvm.inline_asm(None, [], "cp.async.commit_group;", "", has_side_effects=True, is_align_stack=False)


@dsl_user_op
def cp_async_wait(pending: int, loc=None, ip=None) -> None:
    """Wait until at most ``pending`` of this thread's committed cp.async groups are still in flight."""
    llvm.inline_asm(None, [], f"cp.async.wait_group {pending};", "", has_side_effects=True, is_align_stack=False)


@dsl_user_op
def ld_shared_v4(smem_addr, offset: int = 0, loc=None, ip=None) -> list:
    """16-byte shared-memory load; volatile so it stays behind the preceding ``cp_async_wait``."""
    res = llvm.inline_asm(_struct(4, T.i32()), [Int32(smem_addr).ir_value(loc=loc, ip=ip)],
                          f"ld.shared.v4.u32 {{$0,$1,$2,$3}}, [$4+{offset}];", "=r,=r,=r,=r,r",
                          has_side_effects=True, is_align_stack=False)
    return [Uint32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


@dsl_user_op
def ldmatrix_x4(smem_addr, loc=None, ip=None) -> list:
    """``ldmatrix.sync.aligned.m8n8.x4.shared.b16``: lanes 8j..8j+7 give the row addresses of 8 x 8 matrix j; lane
    (g = lane / 4, t = lane % 4) receives row g, elements 2t..2t+1 of each matrix. Volatile, like ``ld_shared_v4``."""
    res = llvm.inline_asm(_struct(4, T.i32()), [Int32(smem_addr).ir_value(loc=loc, ip=ip)],
                          "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {$0,$1,$2,$3}, [$4];", "=r,=r,=r,=r,r",
                          has_side_effects=True, is_align_stack=False)
    return [Uint32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(4)]


@dsl_user_op
def ld_shared_words(smem_addr, n: int, loc=None, ip=None) -> list:
    """``n`` (1, 2 or 4) consecutive 32-bit words from shared memory in one load (4n bytes, 4n-byte aligned);
    volatile, like ``ld_shared_v4``, so it stays behind the pipeline-stage wait that makes the words valid."""
    vec = {1: "", 2: ".v2", 4: ".v4"}[n]
    outs = ",".join(f"${i}" for i in range(n))
    res = llvm.inline_asm(_struct(n, T.i32()) if n > 1 else T.i32(), [Int32(smem_addr).ir_value(loc=loc, ip=ip)],
                          f"ld.shared{vec}.u32 {{{outs}}}, [${n}];" if n > 1 else "ld.shared.u32 $0, [$1];",
                          ",".join(["=r"] * n) + ",r", has_side_effects=True, is_align_stack=False)
    if n == 1:
        return [Uint32(res)]
    return [Uint32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(n)]


@dsl_user_op
def ld_global_narrow(addr, pred, nbytes: int, loc=None, ip=None) -> Uint32:
    """Predicated ``ld.global.nc`` of 1, 2 or 4 bytes, zero-extended into a 32-bit register (0 when ``pred`` is
    false; no memory touched). Weights are read once: no L1 allocation. (``ld_global`` covers 8 and 16 bytes.)"""
    ty = {1: "u8", 2: "u16", 4: "u32"}[nbytes]
    asm = f"{{mov.b32 $0, 0;\n @$2 ld.global.nc.L1::no_allocate.{ty} $0, [$1];}}"
    operands = [Int64(addr).ir_value(loc=loc, ip=ip), Boolean(pred).ir_value(loc=loc, ip=ip)]
    return Uint32(llvm.inline_asm(T.i32(), operands, asm, "=r,l,b", has_side_effects=False, is_align_stack=False))


@dsl_user_op
def f16x2_to_f32(v, loc=None, ip=None) -> tuple:
    """Packed fp16x2 -> (low, high) as f32 (exact)."""
    res = llvm.inline_asm(llvm.StructType.get_literal([T.f32(), T.f32()]), [Uint32(v).ir_value(loc=loc, ip=ip)],
                          "{.reg .b16 l, h; mov.b32 {l, h}, $2; cvt.f32.f16 $0, l; cvt.f32.f16 $1, h;}",
                          "=f,=f,r", has_side_effects=False, is_align_stack=False)
    return (Float32(llvm.extractvalue(T.f32(), res, [0], loc=loc, ip=ip)),
            Float32(llvm.extractvalue(T.f32(), res, [1], loc=loc, ip=ip)))


@dsl_user_op
def prefetch_l2_bulk(gmem_addr, nbytes, pred, loc=None, ip=None) -> None:
    """``cp.async.bulk.prefetch.L2`` of ``nbytes`` (a multiple of 16, 16-byte aligned address) into L2, when ``pred``:
    a request the memory system serves on its own, with no register, shared-memory slot or barrier held for it. L2
    is the GPU's point of coherence, so a prefetch may run before the previous grid has finished (its writes land
    in L2 too); only reads into the SM must wait for it."""
    llvm.inline_asm(None, [Int64(gmem_addr).ir_value(loc=loc, ip=ip), Int32(nbytes).ir_value(loc=loc, ip=ip),
                           Boolean(pred).ir_value(loc=loc, ip=ip)],
                    "@$2 cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r,b",
                    has_side_effects=True, is_align_stack=False)
