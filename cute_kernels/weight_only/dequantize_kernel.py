"""WeightDequantize: dense[n, k] = decode(w_packed)[n, k] [* group_scales[n, k // group]] in fp16 / bf16.

What it computes
    The dense weight of the "dense" path of ``quantized_mm`` (dequantize, then one cuBLAS GEMM): the exact decode of
    ``cute_kernels.formats.bitpack`` (8: int8, 4: sign-extended nibble, 2: code - 2, 1: +-1), optionally times the
    per-(row, group) scale, rounded once to the output dtype. With group scales the product is formed in fp32 and
    then rounded (cvt.rn), so the result is bit-equal to ``(decode(code) * float32(s)).to(dtype)``, the CPU reference
    (``quantized_mm.dequantize_reference``). The per-tensor scale is not applied here (the GEMM applies it).

Layouts (dynamic N, K; K % 8 == 0 - the host pads other K)
    w    uint8 [N, K * bits / 8], contiguous (rows back to back), base aligned to ``bits`` bytes
    out  [N, K] fp16 / bf16, contiguous, 16-byte aligned
    gs   [N, K / group] f32 / f16 / bf16, contiguous, passed flat ([N * K / group]); group a multiple of 32;
         or absent

The template and its specializations
    One ``@cute.kernel``; the bit width (the kernel-side format of ``formats.py``), the output dtype and the group
    scales' dtype (or their absence) are Python constants of the instance: one compiled specialization each, no
    branch on them in device code - the same ``template<int BITS>`` scheme as the GEMM (kernel.py).

Work split (memory-bound: the 16-byte stores are most of the traffic)
    Both tensors being contiguous, the output is one flat run of 16-byte chunks of 8 values, and chunk ``i``'s codes
    are the ``bits`` bytes at flat offset ``i * bits`` of ``w`` - no row arithmetic on the data path. Thread ``t``
    of CTA ``b`` owns chunks ``(b * CHUNKS_PER_THREAD + u) * THREADS + t``: the 32 lanes of a warp write 512
    contiguous bytes per store and read ``32 * bits`` contiguous bytes per load; each thread issues its
    ``CHUNKS_PER_THREAD`` loads before the first decode, so several loads per thread are in flight.

Decode (reuses the GEMM's formats)
    The GEMM's formats decode a 32-bit word into pairs of values ``(q, q + P)`` (P = pairs per word: what one
    shift-and-mask yields), because the MMA may pair any two K positions; a dense row needs adjacent pairs
    ``(2q, 2q + 1)``. An unshuffle of the word's ``bits``-wide fields (Hacker's Delight 7-2: swap stages of width
    ``bits`` .. 8) moves the even fields to the low half and the odd fields to the high half, after which the
    format's own ``decode_pair(q)`` - the magic-number decode - yields exactly ``(code 2q, code 2q + 1)``. 8-bit
    pairs ``(2q, 2q + 1)`` already. A chunk's codes fill 8 * bits bits of the word; the stages move the empty high
    fields into the unused pair slots.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint32, const_expr, range_constexpr

from . import ptx
from .formats import BF16, F16, signed_format

THREADS = 256
CHUNKS_PER_THREAD = 4  # loads in flight per thread before the first store
VALUES_PER_CHUNK = 8  # one 16-byte store of fp16 / bf16
LUT_XOR_AND = 0x28  # lop3: (a ^ b) & c
LUT_XOR = 0x3C  # lop3: a ^ b


def unshuffle_fields(w, bits: int):
    """Even ``bits``-wide fields of ``w`` to the low half (in order), odd fields to the high half."""
    s = bits
    while s < 16:
        # swap the two middle s-bit fields of every 4s-bit group: t marks the bits that differ, then flip both
        mask = {1: 0x22222222, 2: 0x0C0C0C0C, 4: 0x00F000F0, 8: 0x0000FF00}[s]
        t = ptx.lop3_rrc(w, ptx.shr(w, s), mask, LUT_XOR_AND)
        w = ptx.lop3_rrc(ptx.lop3_rrc(w, t, 0, LUT_XOR), ptx.shl(t, s), 0, LUT_XOR)
        s *= 2
    return w


class WeightDequantize:
    """One specialization: ``bits`` in {1, 2, 4, 8}, ``out_dtype`` Float16 / BFloat16, ``scale_dtype`` the group
    scales' cutlass dtype or None."""

    def __init__(self, bits: int, out_dtype, scale_dtype):
        self.fmt = signed_format(bits)
        self.bits = bits
        self.ct = BF16 if out_dtype is cutlass.BFloat16 else F16
        self.scale_dtype = scale_dtype

    # ------------------------------------------------------------------------------------------------ host side
    @cute.jit
    def __call__(self, w: cute.Tensor, out: cute.Tensor, group_scales, group: Int32, stream):
        chunks = out.shape[0] * (out.shape[1] // VALUES_PER_CHUNK)
        per_cta = THREADS * CHUNKS_PER_THREAD
        self.kernel(w, out, group_scales, group).launch(
            grid=[(chunks + per_cta - 1) // per_cta, 1, 1], block=[THREADS, 1, 1], stream=stream)

    # ---------------------------------------------------------------------------------------------- device side
    @cute.kernel
    def kernel(self, w: cute.Tensor, out: cute.Tensor, group_scales, group: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        row_chunks = out.shape[1] // VALUES_PER_CHUNK
        chunks = out.shape[0] * row_chunks
        w_base = w.iterator.toint()
        out_base = out.iterator.toint()
        first = bidx * (THREADS * CHUNKS_PER_THREAD) + tidx
        # Every load before the first store: the scale loads are plain (may-alias) loads, which the compiler would
        # otherwise keep behind the preceding stores, one round trip per chunk.
        codes, scales = [], []
        for u in range_constexpr(CHUNKS_PER_THREAD):
            i = first + u * THREADS
            codes.append(self.load_codes(w_base, i, i < chunks))
            scales.append(None)
            if const_expr(self.scale_dtype is not None):
                scales[u] = self.group_scale(group_scales, i, group)
        for u in range_constexpr(CHUNKS_PER_THREAD):
            i = first + u * THREADS
            ptx.st_global_v4(out_base + Int64(i) * 16, self.decode_chunk(codes[u], scales[u]), i < chunks)

    # ----------------------------------------------------------------- per-thread pieces (emulated in the CPU tests)
    def load_codes(self, w_base, i, live) -> list:
        """The ``bits`` bytes of codes of chunk ``i`` (zero when not ``live``): 1 word, or 2 for 8-bit."""
        addr = w_base + Int64(i) * self.bits
        if self.bits == 8:
            return ptx.ld_global(addr, live, 2, streaming=True)
        return [ptx.ld_global_narrow(addr, live, self.bits)]

    def group_scale(self, group_scales, i, group):
        """f32 scale of chunk ``i``. group_scales is the flat view of the contiguous [N, K / group]: a group is
        ``group / 8`` chunks and a row ``K / group`` groups, so chunk i's scale is entry ``i // (group / 8)`` - one
        unsigned division (a chunk never straddles a group: groups are multiples of 32 values)."""
        f = Uint32(i) // Uint32(group // VALUES_PER_CHUNK)
        f = cutlass.min(f, Uint32(group_scales.shape[0] - 1))  # dead threads past the end: any scale, no store
        return group_scales[Int32(f)].to(Float32)

    def decode_chunk(self, words: list, scale) -> list:
        """8 codes -> 4 packed fp16x2 / bf16x2 registers, values in K order (low half = lower K)."""
        fmt, ct = self.fmt, self.ct
        if self.bits == 8:
            pairs = [(fmt.prepare_word(wd, ct), q) for wd in words for q in range(2)]
        else:
            wd = unshuffle_fields(words[0], self.bits)
            pairs = [(wd, q) for q in range(4)]
        res = []
        for wd, q in pairs:
            v = fmt.decode_pair(wd, q, ct, None)  # exact small integers in the packed type
            if scale is not None:
                lo, hi = self.unpack_f32(v)
                v = ptx.cvt_pair_f32(ct.x2, hi * scale, lo * scale)  # f32 product, one rounding
            res.append(v)
        return res

    def unpack_f32(self, v) -> tuple:
        if self.ct is BF16:  # a bf16 is the high half of its f32
            return (ptx.f32_from_bits(ptx.shl(v, 16)), ptx.f32_from_bits(ptx.lop3(v, 0xFFFF0000, 0, ptx.LUT_AND_OR)))
        return ptx.f16x2_to_f32(v)
