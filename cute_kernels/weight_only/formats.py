"""Kernel-side weight formats of the weight-only GEMM: how one 32-bit word of packed weights becomes MMA operands.

A format is a trace-time plug-in of :class:`~cute_kernels.weight_only.kernel.WeightOnlyGemm`. The kernel loads
16-byte vectors of a row-major ``[N, K * bits / 8]`` byte matrix (K packed LSB-first, 32 / bits values per word),
splits each word into *pairs* of values and asks the format for one packed fp16x2 / bf16x2 register per pair. The
kernel never branches on the format; the bit width is a Python constant of the format object, so each width is its
own compiled specialization of the one kernel definition (the seed's ``template<int BITS>``).

Pairs. The MMA wants two K-values of one weight row in each 32-bit register. K is the reduction axis, so the two
need not be adjacent: any pairing works as long as the activation register holds the same two K positions. Each
format pairs what its cheapest decode produces - shift-and-mask of a word yields values ``(q, q + values/2)`` in the
low and high half at once (the FasterTransformer trick); the 8-bit decode uses ``prmt`` and pairs ``(2q, 2q+1)``.

Decode ("magic number"). OR-ing a b-bit code ``u`` into the mantissa of a float whose ULP is 1 gives exactly
``MAGIC + u`` (fp16 1024.0 = 0x6400, bf16 128.0 = 0x4300); one packed fma then subtracts ``MAGIC + offset``, which is
exact. Group scales multiply afterwards (a second packed op, one rounding to fp16/bf16 - as vLLM's AWQ kernel and
every fp16 weight-only kernel do). Code -> value, as in ``cute_kernels.formats.bitpack`` / ``awq``:

====== ======================================== ======================================================
format decode of a pair                         value
====== ======================================== ======================================================
int8   prmt(w ^ 0x80808080, MAGIC bytes)        fp16: (1024 + b^0x80) - 1152; bf16: via f32 2^23 + b^0x80
int4   ((w >> 4q) & 0x000F000F) ^ (MAGIC|8)     (MAGIC + (u ^ 8)) - (MAGIC + 8) = sign-extended nibble
int2   ((w >> 2q) & 0x00030003) | MAGIC         (MAGIC + u) - (MAGIC + 2)
int1   ((w << (15 - q)) & 0x80008000) ^ (-1.0)  sign bit flipped by the code: set -> +1, clear -> -1
awq    ((w >> 4q) & 0x000F000F) | MAGIC         ((MAGIC + u) - (MAGIC + z)) * s, z and s per (row, group)
====== ======================================== ======================================================

The table shows the per-pair placement (every pair shifted down to bit 0). With ``in_place`` (a tile option) a
pair's fields stay where they fit in the mantissa and the fma that removes the magic also scales by 2^-j; see the
comment above ``WeightFormat``.

Group context. Scales and zero points are per (row, group of >= 32 K values); a word holds <= 32 values and groups
are 32-aligned, so one context serves every pair of a word. ``group_ctx`` turns the loaded scale (f32) and zero
(u8) into what ``decode_pair`` consumes (packed registers), once per row and 32-value block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cutlass import Float32

from . import ptx


@dataclass(frozen=True)
class ComputeType:
    """The 16-bit type the MMA runs in, with its magic-number constants (16-bit patterns)."""

    name: str  # "f16" | "bf16"
    magic: int  # 2^mantissa, whose ULP is 1: u | magic == magic + u for u < 2^mantissa
    one: int
    mantissa: int  # explicit mantissa bits (f16 10, bf16 7)

    @property
    def x2(self) -> str:
        return f"{self.name}x2"

    @staticmethod
    def pair(bits16: int) -> int:
        return (bits16 & 0xFFFF) * 0x00010001

    def magic_plus(self, c: int) -> int:
        return self.magic + c

    def neg(self, bits16: int) -> int:
        return bits16 | 0x8000

    def encode(self, value: float) -> int:
        """16-bit pattern of ``value``, which must be exact in this type (decode constants are never rounded)."""
        import numpy as np

        if self.name == "f16":
            bits = int(np.array(value, np.float16).view(np.uint16))
            exact = float(np.array(value, np.float16)) == value
        else:
            f32 = int(np.array(value, np.float32).view(np.uint32))
            bits, exact = f32 >> 16, (f32 & 0xFFFF) == 0 and float(np.float32(value)) == value
        if not exact:
            raise ValueError(f"{value} is not exact in {self.name}")
        return bits


F16 = ComputeType("f16", magic=0x6400, one=0x3C00, mantissa=10)  # 1024.0
BF16 = ComputeType("bf16", magic=0x4300, one=0x3F80, mantissa=7)  # 128.0
NEG_ZERO2 = 0x80008000  # fma addend that leaves a product untouched (and -0 * s stays -0)


# Where a pair's fields sit when the magic is OR-ed in (``in_place``, a compile-time choice of the tile: see
# ``TileShape.fields_in_place``). Per pair (False): every pair is first shifted down to bit 0, one shift per pair. In
# place (True): a field may start at any mantissa bit j that keeps it whole, and the fma that removes the magic also
# multiplies by 2^-j (a power of two: still exact), so one shifted copy of the word serves every field that fits in
# the mantissa - per 32-bit word 3 shifts instead of 15 for 1-bit codes (2 in fp16), 2 instead of 7 for 2-bit (1 in
# fp16), 1 instead of 3 for 4-bit in fp16 (bf16's 7 mantissa bits hold one nibble: no change there). The 1-bit
# decode becomes lop3 + fma instead of shift + lop3.


class WeightFormat:
    """Base of the kernel-side formats (see module docstring). Subclasses set ``bits`` and ``name``."""

    bits: int
    name: str
    has_zeros = False  # True: a per-(row, group) zero-point tensor is an operand
    epilogue_scale = True  # the kernel's scalar scale multiplies the fp32 accumulator (AWQ: its scales are all there)
    zero_by_mma = False  # True: each MMA is followed by a correction MMA (``AwqInt4ZeroMma``)
    takes_param_words = False  # the kernel can take its group parameters as words (TileShape.param_words)
    field_min_bit = 0  # lowest mantissa bit a field may start at, in place

    @property
    def values_per_word(self) -> int:
        return 32 // self.bits

    @property
    def pairs_per_word(self) -> int:
        return self.values_per_word // 2

    @property
    def values_per_vector(self) -> int:
        """K values in one 16-byte load."""
        return 128 // self.bits

    @property
    def key(self) -> str:
        return self.name

    def pair_elems(self, q: int) -> tuple[int, int]:
        """Word element indices (low half, high half) of pair ``q``: the shift-and-mask pairing."""
        return q, q + self.pairs_per_word

    def prepare_word(self, w, ct: ComputeType):
        return w

    def field_bits(self, ct: ComputeType, in_place: bool) -> list[int]:
        """The mantissa bits j at which ``field`` leaves a pair's low field, in turn."""
        if not in_place:
            return [0]
        fit = min((ct.mantissa - self.bits - self.field_min_bit) // self.bits + 1, self.pairs_per_word)
        return [self.field_min_bit + i * self.bits for i in range(fit)]

    def field(self, w, q: int, ct: ComputeType, in_place: bool):
        """(word, j): ``w`` shifted so that pair q's low field starts at bit j (and its high field at 16 + j). In
        place, the shift is the same for a run of consecutive pairs, so LLVM keeps one shifted word per run."""
        bits = self.field_bits(ct, in_place)
        j = bits[q % len(bits)]
        p = self.bits * q
        return (ptx.shr(w, p - j) if p >= j else ptx.shl(w, j - p)), j

    def remove_magic(self, h, j: int, offset: int, ct: ComputeType):
        """(MAGIC + u * 2^j) * 2^-j - (MAGIC * 2^-j + offset) = u - offset, one packed fma, exact."""
        return ptx.fma_x2_cc(ct.x2, h, ct.pair(ct.encode(2.0 ** -j)),
                             ct.pair(ct.neg(ct.encode(2.0 ** (ct.mantissa - j) + offset))))

    def group_ctx(self, ct: ComputeType, scale, zero, in_place: bool = False):
        """Per (row, block) decode context from a Float32 scale (or None) and a u8 zero point (or None)."""
        return None if scale is None else ptx.cvt_pair_f32(ct.x2, scale, scale)

    # The same context precomputed on the host, as 32-bit words per (row, group) (the WGMMA path stages them with
    # its TMA stages and reads them from shared memory: no per-K-tile conversion). Fields not in place only.
    def context_word_count(self, has_scale: bool) -> int:
        return 1 if has_scale else 0

    def context_words(self, ct: ComputeType, scale16, zeros) -> list:
        """Host side: the words (int64 tensors holding 32-bit patterns) from the scales' 16-bit patterns in the
        compute type (int64 tensor, or None) and the zero points (int64 tensor, or None)."""
        return [] if scale16 is None else [scale16 * 0x00010001]  # the scale in both halves

    def group_ctx_words(self, ct: ComputeType, words: list):
        """Kernel side: ``group_ctx`` from the loaded ``context_words``."""
        return words[0] if words else None

    def decode_pair(self, w, q: int, ct: ComputeType, ctx, in_place: bool = False):
        """One packed fp16x2 / bf16x2 register: the values of pair q of word ``w`` (after ``prepare_word``)."""
        raise NotImplementedError

    @staticmethod
    def _apply_scale(v, ct: ComputeType, ctx):
        return v if ctx is None else ptx.fma_x2_rc(ct.x2, v, ctx, NEG_ZERO2)


class SignedInt4(WeightFormat):
    bits, name = 4, "int4"

    def decode_pair(self, w, q, ct, ctx, in_place=False):
        # XOR-ing bit 3 of the nibble turns two's complement into offset-8 binary; the same lop3 sets the magic.
        x, j = self.field(w, q, ct, in_place)
        h = ptx.lop3(x, 0x000F000F << j, ct.pair(ct.magic | (0x0008 << j)), ptx.LUT_AND_XOR)
        return self._apply_scale(self.remove_magic(h, j, 8, ct), ct, ctx)


class OffsetInt2(WeightFormat):
    bits, name = 2, "int2"

    def decode_pair(self, w, q, ct, ctx, in_place=False):
        x, j = self.field(w, q, ct, in_place)
        h = ptx.lop3(x, 0x00030003 << j, ct.pair(ct.magic), ptx.LUT_AND_OR)
        return self._apply_scale(self.remove_magic(h, j, 2, ct), ct, ctx)


class SignBit1(WeightFormat):
    bits, name = 1, "int1"
    # 2 * MAGIC * 2^-j + 1 is exact only for j >= 1 (2^(mantissa + 1) + 1 needs one bit more than the type has).
    field_min_bit = 1

    def decode_pair(self, w, q, ct, ctx, in_place=False):
        if not in_place:
            # Move bits q and q+16 onto the two sign bits; XOR with (-1, -1) gives +1 for a set bit, -1 for clear.
            v = ptx.lop3(ptx.shl(w, 15 - q), 0x80008000, ct.pair(ct.neg(ct.one)), ptx.LUT_AND_XOR)
            return self._apply_scale(v, ct, ctx)
        # MAGIC + b 2^j, then (MAGIC + b 2^j) 2^(1-j) - (2 MAGIC 2^-j + 1) = 2b - 1: +1 for a set bit, -1 for clear.
        x, j = self.field(w, q, ct, in_place)
        h = ptx.lop3(x, 0x00010001 << j, ct.pair(ct.magic), ptx.LUT_AND_OR)
        v = ptx.fma_x2_cc(ct.x2, h, ct.pair(ct.encode(2.0 ** (1 - j))),
                          ct.pair(ct.neg(ct.encode(2.0 ** (ct.mantissa + 1 - j) + 1))))
        return self._apply_scale(v, ct, ctx)


class SignedInt8(WeightFormat):
    bits, name = 8, "int8"

    def pair_elems(self, q):
        return 2 * q, 2 * q + 1

    def prepare_word(self, w, ct):
        return ptx.xor_c(w, 0x80808080)  # int8 -> offset-128 binary, once per word

    def group_ctx(self, ct, scale, zero, in_place=False):
        if ct is BF16:
            return scale  # bf16 has 8 significant bits: the code goes through f32 and takes the scale there
        return super().group_ctx(ct, scale, zero, in_place)

    def group_ctx_words(self, ct, words):
        if words and ct is BF16:
            return ptx.f32_from_bits(ptx.shl(words[0], 16))  # the staged bf16 scale, as the f32 the decode takes
        return super().group_ctx_words(ct, words)

    def decode_pair(self, w, q, ct, ctx, in_place=False):
        if ct is F16:
            # fp16 1024 + u is exact for u < 1024: bytes (b_2q, 0x64, b_2q+1, 0x64).
            h = ptx.prmt_c(w, 0x64646464, 0x4140 + 0x0202 * q)
            v = ptx.fma_x2_cc(ct.x2, h, ct.pair(ct.one), ct.pair(ct.neg(ct.magic_plus(128))))
            return self._apply_scale(v, ct, ctx)
        # bf16: f32 bit pattern 0x4B0000uu = 2^23 + u, exact; subtract, scale in f32, round once to bf16.
        halves = []
        for e in (2 * q, 2 * q + 1):
            f = ptx.f32_from_bits(ptx.prmt_c(w, 0x4B000000, 0x7440 | e)) - Float32(8388736.0)
            halves.append(f if ctx is None else f * ctx)
        return ptx.cvt_pair_f32(ct.x2, halves[1], halves[0])


def split_context_word(word):
    """Kernel side: a context word of two 16-bit values -> (low half in both halves, high half in both halves), the
    packed operands the decode's fmas take (two byte permutes per word, against two words' loads)."""
    return ptx.prmt(word, word, 0x1010), ptx.prmt(word, word, 0x3232)


class AwqInt4(WeightFormat):
    """AutoAWQ's unsigned int4 with a zero point and a scale per (output channel, group).

    The kernel reads it in the [N, K/2] K-packed layout of the other formats (``awq_repack`` transposes the
    checkpoint's [IC, OC/8] int32 once); scales are [N, groups] in the activation dtype, zeros u8 [N, groups].
    """

    bits, name, has_zeros = 4, "awq", True
    epilogue_scale = False

    def group_ctx(self, ct, scale, zero, in_place=False):
        # -(MAGIC 2^-j + z) in both halves for each field position j: z in units of 2^-j, the ULP of MAGIC 2^-j.
        neg_offsets = {j: ptx.splat_or(ptx.shl(zero, j), ct.pair(ct.neg(ct.encode(2.0 ** (ct.mantissa - j)))))
                       for j in self.field_bits(ct, in_place)}
        return neg_offsets, None if scale is None else ptx.cvt_pair_f32(ct.x2, scale, scale)

    def context_word_count(self, has_scale):
        return 2

    def context_words(self, ct, scale16, zeros):
        # -(MAGIC + z) in both halves (the fields-not-in-place offset, j = 0 in ``group_ctx``): z sits in the
        # mantissa of MAGIC, whose ULP is 1. Two words where one could hold both values (as ``AwqInt4OneFma``'s):
        # in one word the WGMMA path ran 1.03-1.09x slower in bf16 on three of four layers (session 43, H100;
        # awq_sm90.BLOB_DECODE_ONE_FMA's comment has the run).
        return [scale16 * 0x00010001, (zeros | ct.neg(ct.magic)) * 0x00010001]

    def group_ctx_words(self, ct, words):
        return {0: words[1]}, words[0]

    def decode_pair(self, w, q, ct, ctx, in_place=False):
        neg_offsets, scale2 = ctx
        x, j = self.field(w, q, ct, in_place)
        h = ptx.lop3(x, 0x000F000F << j, ct.pair(ct.magic), ptx.LUT_AND_OR)
        v = ptx.fma_x2_cr(ct.x2, h, ct.pair(ct.encode(2.0 ** -j)), neg_offsets[j])  # u - z, exact
        if scale2 is None:  # promoted scale: the kernel applies it to the step's partial sums
            return v
        return ptx.fma_x2_rc(ct.x2, v, scale2, NEG_ZERO2)  # (u - z) * s, rounded once


class AwqInt4ZeroMma(AwqInt4):
    """AWQ with the magic number and the zero point taken out by the tensor cores instead of per weight.

    The decode of a pair is one lop3: the nibble ORed into a float whose ULP at the field's bit is 1 gives M_j + u
    exactly (fp16: M_0 = 1024 = 0x6400 for a field at bit 0, M_4 = 64 = 0x5400 for one at bit 4, in place; bf16:
    128 at bit 0), and the MMA takes that as it is. A second MMA per main MMA, on the same activation fragment,
    with the (row, group) constants -(M_j + z) as its A operand (``correction``, exact), adds -sum (M_j + z) x, so the
    two leave sum (u - z) x in the step's fp32 partial sums, which the promoted scale multiplies (``promote_scales``
    only: every K step in one group). Per 32-bit word: the lop3s and, in place in fp16, one shift - against a packed
    fma (or sub) per pair and a shift per pair of the other AWQ decodes - for one more HMMA per word, on a tensor
    pipe these tiles keep 10-20% busy (docs/weight_only.md).

    Rounding: the main MMA's running sum reaches ~M_j sum|x| before the correction cancels it, so the kernel puts
    each correction right behind its main MMA in the same accumulator (two such chains a step): a partial sum is
    rounded at <= (M_0 + 15) * 16 |x|max, ~2^-13 of that per step, against 2^-11 |w| per weight for the fp16 weight
    the other decodes round (tests: tests/test_awq_gpu.py's float64 checks)."""

    name = "awq_zmma"
    zero_by_mma = True

    def magic_at(self, ct, j: int) -> int:
        """M_j: the 16-bit float 2^(mantissa - j), whose mantissa bit j weighs 1."""
        return ct.encode(2.0 ** (ct.mantissa - j))

    def field_j(self, ct, q: int, in_place: bool) -> int:
        bits = self.field_bits(ct, in_place)
        return bits[q % len(bits)]

    def decode_pair(self, w, q, ct, ctx, in_place=False):
        x, j = self.field(w, q, ct, in_place)
        return ptx.lop3(x, 0x000F000F << j, ct.pair(self.magic_at(ct, j)), ptx.LUT_AND_OR)  # M_j + u, exact

    # Parameter words (TileShape.param_words): per (row, group) the low half -(M_0 + z) and the high half the scale, in
    # x's 16-bit type. The kernel widens the scale to fp32 (exact) and gets each field position's -(M_j + z) from
    # the low half by one packed add of M_0 - M_j (exact: integers below 2^(mantissa + 1)).
    takes_param_words = True

    def param_words_host(self, ct, scale16, zeros):
        """Host side: the words (int64 tensor of 32-bit patterns) from the scales' 16-bit patterns (int64 tensor) and
        the zero points (int64 tensor)."""
        return (ct.neg(self.magic_at(ct, 0)) | zeros) | (scale16 << 16)

    def param_word_scale(self, ct, word):
        """Kernel side: the promoted scale (Float32) of a parameter word."""
        if ct is BF16:
            return ptx.f32_from_bits(ptx.lop3(word, 0xFFFF0000, 0, ptx.LUT_AND_OR))
        return ptx.f16x2_to_f32(word)[1]

    def param_word_ctx(self, ct, word, in_place=False):
        """Kernel side: ``group_ctx``'s corrections (-(M_j + z) in both halves per field position j) from a word."""
        neg0 = ptx.prmt(word, word, 0x1010)
        return {j: neg0 if j == 0 else ptx.fma_x2_cc(ct.x2, neg0, ct.pair(ct.one),
                                                   ct.pair(ct.encode(2.0 ** ct.mantissa - 2.0 ** (ct.mantissa - j))))
                for j in self.field_bits(ct, in_place)}

    def correction(self, q, ct, ctx, in_place=False):
        """The correction MMA's A register for pair q of a row: -(M_j + z) in both halves (``group_ctx``)."""
        neg_offsets, scale2 = ctx
        if scale2 is not None:
            raise NotImplementedError("awq_zmma runs with promoted scales only")
        return neg_offsets[self.field_j(ct, q, in_place)]


class OneFma:
    """The subnormal decode of a 4-bit field with its group's scale in one packed fma (mixed into a 4-bit format).

    The nibble is masked into the top four mantissa bits of a zero exponent (j = mantissa - 4: fp16 6, bf16 3): the
    16-bit value is the subnormal h = u 2^(j - E), exact (E = 24 fp16, 133 bf16: the subnormal ULP). Then
    fma(h, S, C) with S = s 2^(E - j - e) and C = -o s 2^-e gives (u - o) s 2^-e for the format's offset o, and the
    epilogue multiplies the fp32 accumulator by 2^e (``exponent``: the least e >= 0 that keeps S finite, 0 unless some
    |s| >= 0.25; ``wgmma.param_words`` computes it once, builds the words with it (``context_words`` takes it) and stores
    it on them as ``scale_exponent``, and ``wgmma.WgmmaPlan`` applies it).
    S is exact (s times a power of two). Per pair: a shift (each pair moves its fields to bit j), a lop3 and one fma,
    against the magic-number decode's lop3 and two packed ops (and a shift for three pairs in four)."""

    epilogue_scale = True  # 2^e (times a signed format's per-tensor scale)
    _SUBNORMAL_EXP = {"f16": 24, "bf16": 133}  # -log2 of the type's smallest subnormal
    _MAX = {"f16": 65504.0, "bf16": 3.3895313892515355e38}

    def field_bits(self, ct, in_place):
        return [ct.mantissa - self.bits]

    def lift(self, ct) -> int:
        """E - j: S = s 2^(lift - e)."""
        return self._SUBNORMAL_EXP[ct.name] - (ct.mantissa - self.bits)

    def exponent(self, ct, max_abs_scale: float) -> int:
        """e of the class docstring: the least e >= 0 with max|s| 2^(E - j - e) finite in x's dtype (``max_finite``
        gives the max; 0 for a non-finite one)."""
        e = 0
        while math.isfinite(max_abs_scale) and max_abs_scale * 2.0 ** (self.lift(ct) - e) > self._MAX[ct.name]:
            e += 1
        return e

    @staticmethod
    def max_finite(scales) -> float:
        """max |s| over the finite scales (0.0 if none): e follows them, and a row with a non-finite scale gives
        non-finite outputs in any format."""
        import torch

        a = scales.abs()
        a = a[torch.isfinite(a)]
        return a.max().item() if a.numel() else 0.0

    @staticmethod
    def host_scales(ct, scale16):
        """(s as float64, x's torch dtype) from the scales' 16-bit patterns in x's dtype (host)."""
        import torch

        dtype = torch.float16 if ct.name == "f16" else torch.bfloat16
        return ((scale16 ^ 0x8000) - 0x8000).to(torch.int16).view(dtype).double(), dtype

    def scale_exponent(self, ct, scale16) -> int:
        """e of these scales (their 16-bit patterns in x's dtype): ``exponent`` of their finite max."""
        return self.exponent(ct, self.max_finite(self.host_scales(ct, scale16)[0]))

    def host_scale_words(self, ct, scale16, e: int):
        """(s as float64, the S words, x's torch dtype) for exponent e (``scale_exponent``)."""
        s, dtype = self.host_scales(ct, scale16)
        return s, self.word((s * 2.0 ** (self.lift(ct) - e)).to(dtype)), dtype

    @staticmethod
    def bits16(v16):
        """A 16-bit float tensor's bit patterns, as int64 in 0 .. 0xFFFF."""
        import torch

        return v16.view(torch.int16).to(torch.int64) & 0xFFFF

    @classmethod
    def word(cls, v16):
        """A 16-bit tensor's values in both halves of int64-held 32-bit words."""
        return cls.bits16(v16) * 0x00010001

    def fma_decode(self, w, q, ct, scale, offset, flip: int = 0):
        """h = the field's u 2^(j - E) (``flip``: bits XOR-ed into the field, e.g. two's complement -> offset binary);
        returns fma(h, S, C), rounded once."""
        x, j = self.field(w, q, ct, False)
        h = ptx.lop3(x, 0x000F000F << j, (flip * 0x00010001) << j, ptx.LUT_AND_XOR)  # a subnormal, exact
        return ptx.fma_x2(ct.x2, h, scale, offset)


class AwqInt4OneFma(OneFma, AwqInt4):
    """AWQ with ``OneFma``'s decode (fp16 x on the WGMMA path up to ``wgmma.AWQ_ONE_FMA_MAX_M`` tokens, and on the
    decode tiles that fold the scale into the weight: ``wgmma.awq_format``, ``awq.decode_format``). C = -z s 2^-e is
    rounded once to x's dtype (on the host for the WGMMA path's staged words, by cvt in the decode kernel), so a
    weight carries two roundings (C's and the fma's) where ``AwqInt4`` has one: at most 2^-11 (|C| + |w|) <= 0.015 |s|
    in fp16 against 0.008 |s|, a seventieth of a quantization step. This is the rounding of CUTLASS's mixed-input
    ``ConvertAndScaleWithZero`` (w = s q + zero, the zero premultiplied and stored in the 16-bit type), with |C| <= 15
    |s| here."""

    name = "awq_fma"

    def group_ctx(self, ct, scale, zero, in_place=False):
        # The decode path's context from the loaded fp32 scale and u8 zero point, with e = 0 (the host runs this
        # format there only when e = 0, and only on tiles that fold the scale: ``awq.decode_format``; fp16 only:
        # bf16's 2^130 is past fp32's range). The products are exact in fp32; cvt rounds S (exactly: a power of two
        # times a 16-bit s) and C once.
        if ct.name != "f16" or scale is None:
            raise NotImplementedError("awq_fma's decode-path context: fp16 x, scales folded into the weight")
        neg_z = Float32(zero) * Float32(-1.0)
        s_lift = scale * Float32(float(2 ** self.lift(ct)))
        offset = neg_z * scale
        return ptx.cvt_pair_f32(ct.x2, s_lift, s_lift), ptx.cvt_pair_f32(ct.x2, offset, offset)

    def context_word_count(self, has_scale):
        return 1

    def context_words(self, ct, scale16, zeros, e: int):
        # One word, two 16-bit values: S (low half) and C (high half, exact, then one rounding); the kernel spreads
        # each over both halves of a register (``split_context_word``): 4 bytes per (row, group), not 8.
        s, s_words, dtype = self.host_scale_words(ct, scale16, e)
        return [(s_words & 0xFFFF) | (self.bits16((-zeros.double() * s * 2.0 ** -e).to(dtype)) << 16)]

    def group_ctx_words(self, ct, words):
        return split_context_word(words[0])

    def decode_pair(self, w, q, ct, ctx, in_place=False):
        return self.fma_decode(w, q, ct, *ctx)  # u s 2^-e - z s 2^-e


class SignedInt4OneFma(OneFma, SignedInt4):
    """Signed int4 with group scales and ``OneFma``'s decode, on the WGMMA path: XOR-ing bit 3 of the nibble gives
    u = c + 8, and C = -8 s 2^-e is exact (derived in the kernel from S by an exact multiply), so the one rounding of
    fma(h, S, C) = c s 2^-e is the exact format's: the same values, bit for bit (the 2^e multiply is exact). One
    parameter word per (row, group), as the exact format's."""

    name = "int4_fma"

    def group_ctx(self, ct, scale, zero, in_place=False):
        raise NotImplementedError("int4_fma runs on the WGMMA path (host-built parameter words)")

    def context_words(self, ct, scale16, zeros, e: int):
        return [self.host_scale_words(ct, scale16, e)[1]]  # S only: C comes from it in the kernel

    def group_ctx_words(self, ct, words):
        # C = S * (-8 * 2^-lift): a power of two, so the product is exact (the constant is an fp16 / bf16 subnormal)
        neg8 = ct.pair(ct.encode(-8.0 * 2.0 ** -self.lift(ct)))
        return words[0], ptx.fma_x2_rc(ct.x2, words[0], neg8, NEG_ZERO2)

    def decode_pair(self, w, q, ct, ctx, in_place=False):
        return self.fma_decode(w, q, ct, *ctx, flip=0x8)  # (c + 8) s 2^-e - 8 s 2^-e


_SIGNED = {8: SignedInt8(), 4: SignedInt4(), 2: OffsetInt2(), 1: SignBit1()}
AWQ = AwqInt4()
AWQ_ONE_FMA = AwqInt4OneFma()
AWQ_ZERO_MMA = AwqInt4ZeroMma()
INT4_ONE_FMA = SignedInt4OneFma()


def signed_format(bits: int) -> WeightFormat:
    return _SIGNED[bits]


def format_by_key(key: str) -> WeightFormat:
    for f in (*_SIGNED.values(), AWQ, AWQ_ONE_FMA, AWQ_ZERO_MMA, INT4_ONE_FMA):
        if f.key == key:
            return f
    raise KeyError(key)
