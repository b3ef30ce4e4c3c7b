"""Kernel-side activation operands: the MMA's B fragments built from registers loaded straight from global memory.

For every pair of weight values a format decodes (K positions ``lo``, ``hi`` of a word), the activation register
must hold ``x[m, lo]`` and ``x[m, hi]`` in the same halves. The thread loads the word's whole K run of x (8 to 128
bytes) and rearranges in registers:

* fp16 / bf16 x (the MMA type itself): one ``prmt`` per pair picks the two 16-bit halves (none when the pair is
  already an adjacent aligned couple, as for int8 weights).
* fp32 x: the MMA runs in bf16 and every pair is split into ``hi + lo`` bf16 registers (``ptx.split_bf16_pair``);
  the kernel issues one MMA per part against the same weight fragment, so fp32 activations keep ~16 bits of
  mantissa instead of bf16's 8, at twice the (idle, at decode sizes) tensor-core work.
"""

from __future__ import annotations

from dataclasses import dataclass

import cutlass

from . import ptx
from .formats import BF16, F16, ComputeType


@dataclass(frozen=True)
class ActivationOperand:
    dtype: type  # cutlass numeric type of x
    compute: ComputeType
    parts: int  # MMAs per weight fragment (2 for the fp32 split)

    @property
    def bytes_per_value(self) -> int:
        return self.dtype.width // 8

    @property
    def key(self) -> str:
        return self.dtype.__name__

    def words_per_run(self, values: int) -> int:
        return values * self.bytes_per_value // 4

    def pair(self, words, lo: int, hi: int) -> list:
        """B registers (one per part) holding x[lo] (low half) and x[hi] (high half) of a loaded run."""
        if self.parts == 2:
            hi_part, lo_part = ptx.split_bf16_pair(ptx.f32_from_bits(words[lo]), ptx.f32_from_bits(words[hi]))
            return [hi_part, lo_part]
        if hi == lo + 1 and lo % 2 == 0:
            return [words[lo // 2]]
        sel_lo = 0x10 if lo % 2 == 0 else 0x32
        sel_hi = 0x54 if hi % 2 == 0 else 0x76
        return [ptx.prmt(words[lo // 2], words[hi // 2], (sel_hi << 8) | sel_lo)]


def activation_operand(dtype) -> ActivationOperand:
    if dtype is cutlass.Float16:
        return ActivationOperand(dtype, F16, 1)
    if dtype is cutlass.BFloat16:
        return ActivationOperand(dtype, BF16, 1)
    if dtype is cutlass.Float32:
        return ActivationOperand(dtype, BF16, 2)
    raise TypeError(f"unsupported activation dtype {dtype}")
