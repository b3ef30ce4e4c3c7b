"""Warp-level signed int8 MMA atom: ``mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32`` (sm_80+).

nvidia-cutlass-dsl 4.8.1 ships warp-level MMA ops only for f16/bf16, tf32, fp8 and MX types; the int8 instruction
exists in the IR (``MmaAtomSM80Type`` accepts integer operand types) but has no Python op. This module adds that one op.

The operand element types must be the *signed* MLIR integer types (``si8``). ``Int8.mlir_type`` is the signless
``i8``, and an atom built from it silently lowers to ``.u8.u8`` - every negative value would then be read as
``value + 256``. ``tests/test_sm80_mma_atom.py`` pins the emitted PTX qualifiers.

Fragment layouts are the PTX ones for m16n8k32 .s8 (identical, byte for byte, to m16n8k16 .f16 with two int8 per
16-bit lane value), so ``ldmatrix`` loads of K-major int8 tiles feed it directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Type

import cutlass
from cutlass._mlir import ir
import cutlass._mlir.dialects.cute_nvgpu as _cute_nvgpu_ir
from cutlass.cute.atom import make_atom
from cutlass.cute.core import _pack_shape
from cutlass.cute.nvgpu.warp.mma import WarpMmaOp
from cutlass.cute.atom import Trait
from cutlass.cutlass_dsl import T

MMA_SHAPE_MNK = (16, 8, 32)


class MmaInt8Trait(Trait):
    pass


@dataclass(frozen=True)
class MmaInt8Op(WarpMmaOp):
    """int8 x int8 -> int32 warp MMA, shape (16, 8, 32); A row-major (K-major), B col-major (K-major).

    ``a_dtype`` / ``b_dtype`` pick the signedness of each operand (``cutlass.Int8`` or ``cutlass.Uint8``).
    """

    a_dtype: Type[cutlass.Numeric] = cutlass.Int8
    b_dtype: Type[cutlass.Numeric] = cutlass.Int8

    def __post_init__(self) -> None:
        for name, dt in (("a_dtype", self.a_dtype), ("b_dtype", self.b_dtype)):
            if dt not in (cutlass.Int8, cutlass.Uint8):
                raise TypeError(f"MmaInt8Op {name} must be cutlass.Int8 or cutlass.Uint8; got {dt}")

    @staticmethod
    def _signed_mlir_type(dt: Type[cutlass.Numeric]):
        # Signed/unsigned MLIR integer types, never the signless i8 (see the module docstring).
        return T.si8() if dt.signed else T.ui8()

    def _make_trait(
        self,
        *,
        loc: Optional[ir.Location] = None,
        ip: Optional[ir.InsertionPoint] = None,
        **kwargs: Any,
    ) -> MmaInt8Trait:
        shape_mnk = _pack_shape(MMA_SHAPE_MNK, loc=loc, ip=ip)
        ty = _cute_nvgpu_ir.MmaAtomSM80Type.get(
            shape_mnk.type.attribute,
            self._signed_mlir_type(self.a_dtype),
            self._signed_mlir_type(self.b_dtype),
            cutlass.Int32.mlir_type,
        )
        return MmaInt8Trait(make_atom(ty, loc=loc, ip=ip))

    def _verify_fragment_A(self, input, *, loc=None, ip=None) -> bool:
        return True

    def _verify_fragment_B(self, input, *, loc=None, ip=None) -> bool:
        return True

    def __str__(self) -> str:
        return f"warp-level int8 MMA m16n8k32 ({self.a_dtype.__name__} x {self.b_dtype.__name__} -> Int32)"
