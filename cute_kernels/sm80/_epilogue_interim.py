"""INTERIM stand-in for ``cute_kernels.epilogues`` (being written by the lead); delete when that package lands.

It implements only the interface the SM80 kernel relies on, with the same names, so switching is a one-line import
change in ``kernel.py`` / ``launch.py``:

- nodes ``Accumulator()``, ``ColVector(name)`` (per-row value, indexed by m), ``RowVector(name)`` (indexed by n),
  ``Scalar(name)`` (a [1] tensor) and ``Compute(fn, *children)``;
- ``tree.visit(ctx)`` returns an f32 TensorSSA shaped like the accumulator fragment;
- ``EpilogueContext(acc, coords, bounds, tensors)``: the accumulator fragment, a coordinate fragment of the same layout
  giving each element's global (m, n), the bounds (M, N), and the gmem operand tensors by name.

Loads here are per fragment element (clamped into bounds; elements outside are never stored), which is simple but not
what the shared package is meant to do (one vector load per tile through smem).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import cutlass
import cutlass.cute as cute


@dataclass
class EpilogueContext:
    acc: cute.Tensor
    coords: cute.Tensor
    bounds: tuple
    tensors: dict


class Node:
    def visit(self, ctx: EpilogueContext):
        raise NotImplementedError

    def operand_names(self) -> tuple:
        return ()


class Accumulator(Node):
    def visit(self, ctx):
        return ctx.acc.load().to(cutlass.Float32)

    def __repr__(self):
        return "Accumulator()"


class _Vector(Node):
    mode = -1  # 0: indexed by m, 1: indexed by n

    def __init__(self, name: str):
        self.name = name

    def operand_names(self):
        return (self.name,)

    def visit(self, ctx):
        src = ctx.tensors[self.name]
        frag = cute.make_rmem_tensor(ctx.acc.layout, cutlass.Float32)
        last = ctx.bounds[self.mode] - 1
        for i in range(cute.size(frag)):  # trace-time unrolled (plain Python helper)
            # Clamp instead of branching: out-of-bounds elements are computed but never stored.
            idx = cutlass.min(ctx.coords[i][self.mode], last)
            frag[i] = src[idx].to(cutlass.Float32)
        return frag.load()

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r})"


class ColVector(_Vector):
    mode = 0


class RowVector(_Vector):
    mode = 1


class Scalar(Node):
    def __init__(self, name: str):
        self.name = name

    def operand_names(self):
        return (self.name,)

    def visit(self, ctx):
        value = ctx.tensors[self.name][0].to(cutlass.Float32)
        frag = cute.make_rmem_tensor(ctx.acc.layout, cutlass.Float32)
        frag.fill(value)
        return frag.load()

    def __repr__(self):
        return f"Scalar({self.name!r})"


class Compute(Node):
    def __init__(self, fn: Callable[..., Any], *children: Node):
        self.fn = fn
        self.children = children

    def operand_names(self):
        return tuple(n for c in self.children for n in c.operand_names())

    def visit(self, ctx):
        return self.fn(*(c.visit(ctx) for c in self.children))

    def __repr__(self):
        return f"Compute({getattr(self.fn, '__name__', self.fn)}, {', '.join(map(repr, self.children))})"
