"""The nodes of the epilogue visitor tree.

Every node is a trace-time object: ``visit(ctx)`` runs while the kernel is being traced and emits the loads and
arithmetic for the fragment described by ``ctx``. A node's ``key`` is a plain tuple that names exactly what it
bakes into the kernel; the compile cache keys kernels on it.

Vector operands are gathered straight from global memory by each thread for the elements it owns. The index is
clamped to the operand's length instead of predicated: elements past the problem edge compute a harmless value
that the kernel's store then drops (TMA clips; SM80 stores are predicated), and the loop stays branch-free. The
vectors are tiny (M or N floats) and sit in L1/L2 after the first tile, so this costs a few L1 hits per element.

Every node that reads a vector or a matrix from global memory is a ``Prefetched`` node (a ``Scalar``, one value,
is not): its loads (``load``) are separate from its arithmetic, so a kernel can issue the next epilogue sub-tile's
loads before it finishes the current one (``EpilogueTree.fetch``, handed back as ``ctx.fetched``) and their latency
is not paid once per sub-tile. Session 37 (H100): a bias alone in
FP8's epilogue, loaded in place, cost 1.25x the plain GEMM's time at M = 4096 on 7168 x 2048.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32


@dataclass
class EpilogueContext:
    """What a kernel tells the tree about one register fragment of the accumulator.

    acc:      register tensor of accumulator values (Int32 or Float32), ``size(acc)`` elements.
    coord:    ``coord(i) -> (m, n, ...)``: global coordinate of element ``i`` of ``acc`` in the kernel's (M, N) problem.
    tensors:  the epilogue's global-memory operands, by name (``tree.operand_names``).
    """

    acc: cute.Tensor
    coord: Callable
    tensors: dict
    fetched: Optional[dict] = None  # node loads a kernel issued ahead (``EpilogueTree.fetch``), by ``fetch_key``


class EpilogueNode:
    """Base class: a node returns a Float32 TensorSSA shaped like ``ctx.acc``."""

    operands: tuple[str, ...] = ()

    @property
    def key(self) -> tuple:
        raise NotImplementedError

    def visit(self, ctx: EpilogueContext):
        raise NotImplementedError

    def walk(self):
        yield self


class Accumulator(EpilogueNode):
    """The GEMM accumulator converted to Float32 (int32 -> f32 is the seed's ``float(sum)``)."""

    @property
    def key(self):
        return ("acc",)

    def visit(self, ctx):
        return ctx.acc.load().to(Float32)


class Prefetched(EpilogueNode):
    """A node whose global loads can be issued ahead: ``load(ctx)`` issues them (and does nothing else, so no
    instruction waits for them yet); ``visit`` uses the values a kernel fetched ahead, if any, else loads them now."""

    @property
    def fetch_key(self) -> tuple:
        return self.key

    def load(self, ctx):
        raise NotImplementedError

    def loaded(self, ctx):
        if ctx.fetched is not None and self.fetch_key in ctx.fetched:
            return ctx.fetched[self.fetch_key]
        return self.load(ctx)


def _gather(ctx, src, axis: int, dtype):
    """src[coord(i)[axis]] for every fragment element i (clamped to src's length), as a ``dtype`` TensorSSA."""
    frag = cute.make_rmem_tensor(ctx.acc.shape, dtype)
    last = cute.size(src, mode=[0]) - 1  # the vector's own length bounds the clamp
    for i in range(cute.size(frag)):  # plain Python: unrolled at trace time
        frag[i] = src[cutlass.min(ctx.coord(i)[axis], last)].to(dtype)
    return frag.load()


class ZeroPointAccumulator(Prefetched):
    """The int32 accumulator minus an activation zero point's contribution, then converted to Float32: vLLM's
    ``cutlass_scaled_mm_azp``. With activations quantized as x ~= (q - azp) * scale, the GEMM of the codes q
    carries ``azp * sum_k b[k, n]`` too much; the caller passes that column sum as ``adj`` (int32 [N]). Per token
    (``azp`` names an int32 [M] operand): acc - azp[m] * adj[n]; per tensor (``azp`` None): acc - adj[n], with the
    one zero point already folded into adj.

    The correction is taken in int32 before the conversion, not in fp32 after it: acc and azp * adj are each up to
    ~2^31 and nearly cancel, so their fp32 roundings would leave an error far above the result's own rounding. Int32
    wraps, but the true difference fits (the op bounds K), so the wrapped result is exact.

    ``swap_ab``: the kernel computes the transposed problem, so the output's columns are its first coordinate.
    """

    def __init__(self, adj: str = "azp_adj", azp: Optional[str] = None, swap_ab: bool = False):
        self.adj, self.azp, self.swap_ab = adj, azp, swap_ab
        self.operands = (adj,) + ((azp,) if azp else ())

    @property
    def key(self):
        return ("acc_zero_point", self.adj, self.azp, self.swap_ab)

    def load(self, ctx):
        """(azp_adj, azp or None) gathered per fragment element, int32."""
        col_axis = 0 if self.swap_ab else 1
        adj = _gather(ctx, ctx.tensors[self.adj], col_axis, Int32)
        return adj, None if self.azp is None else _gather(ctx, ctx.tensors[self.azp], 1 - col_axis, Int32)

    def visit(self, ctx):
        adj, zp = self.loaded(ctx)
        correction = adj if zp is None else adj * zp
        return (ctx.acc.load() - correction).to(Float32)


class _Operand(EpilogueNode):
    """A node that reads one named global operand; its key is (kind, name)."""

    kind: str

    def __init__(self, name: str):
        self.name = name
        self.operands = (name,)

    @property
    def key(self):
        return (self.kind, self.name)


class _Broadcast(_Operand, Prefetched):
    # which coordinate indexes the operand: 0 = m (one value per row), 1 = n (one value per column)
    axis: int

    def load(self, ctx):
        return _gather(ctx, ctx.tensors[self.name], self.axis, Float32)

    def visit(self, ctx):
        return self.loaded(ctx)


class ColVector(_Broadcast):
    """A per-row vector broadcast along N (a column of the output): e.g. the per-token scale a_scale[m]."""

    kind, axis = "ColVector", 0


class RowVector(_Broadcast):
    """A per-column vector broadcast along M (a row of the output): e.g. the per-channel scale b_scale[n], bias[n]."""

    kind, axis = "RowVector", 1


class Scalar(_Operand):
    """A one-element tensor broadcast to the whole output: e.g. a per-tensor scale."""

    kind = "scalar"

    def visit(self, ctx):
        value = ctx.tensors[self.name][0].to(Float32)
        frag = cute.make_rmem_tensor(ctx.acc.shape, Float32)
        frag.fill(value)
        return frag.load()


class ScalarArgument(_Operand):
    """A run-time Float32 kernel argument (not a tensor) broadcast to the whole output: e.g. the per-tensor weight
    scale that ``quantized_mm`` takes as a Python float, so the call needs no device copy of it."""

    kind = "scalar_arg"

    def visit(self, ctx):
        frag = cute.make_rmem_tensor(ctx.acc.shape, Float32)
        frag.fill(Float32(ctx.tensors[self.name]))
        return frag.load()


class Matrix(_Operand, Prefetched):
    """A full operand with the output's shape, read at each fragment element's coordinate: e.g. a partial sum C
    added to the result (D = epilogue(acc) + C). The kernel passes it as a view in its own (m, n, l) coordinates;
    indices are clamped like the vectors' (elements past the edge are dropped by the store)."""

    kind = "matrix"

    def load(self, ctx):
        src = ctx.tensors[self.name]
        frag = cute.make_rmem_tensor(ctx.acc.shape, Float32)
        last_m, last_n = cute.size(src, mode=[0]) - 1, cute.size(src, mode=[1]) - 1
        for i in range(cute.size(frag)):
            c = ctx.coord(i)
            frag[i] = src[cutlass.min(c[0], last_m), cutlass.min(c[1], last_n), c[2]].to(Float32)
        return frag.load()

    def visit(self, ctx):
        return self.loaded(ctx)


class RowGroupGuard(Prefetched):
    """``child`` where each row belongs to its tile's group, NaN where it does not: the check of a grouped GEMM whose
    tiles take their weight from their first row's group (``Sm90GemmKernel.row_groups``, DeepGEMM's contiguous MoE
    layout). ``name`` is the Int32 [M] operand of per-row group ids (negative: a padding row). A row passes if its id
    is negative (padding: unspecified output) or equals the tile's group, ``ctx.tensors["row_group"]``: the kernel's
    ``tile_of`` reads it from the tile's first row, -1 when that id is negative or not below the group count. Any
    other row - a group that does not start on a tile boundary, an id past the last group - comes out NaN, so a
    malformed layout cannot pass for a result and the kernel needs no host-side look at the ids."""

    def __init__(self, child: EpilogueNode, name: str):
        self.child, self.name = child, name
        self.operands = child.operands + ((name,) if name not in child.operands else ())

    @property
    def key(self):
        return ("row_group_guard", self.name, self.child.key)

    @property
    def fetch_key(self):
        return ("row_group_guard", self.name)

    def load(self, ctx):
        """The element's row's id, int32."""
        return _gather(ctx, ctx.tensors[self.name], 0, Int32)

    def visit(self, ctx):
        ids = self.loaded(ctx)
        ok = (ids < 0) | (ids == ctx.tensors["row_group"])
        return cute.where(ok, self.child.visit(ctx), Float32(float("nan")))

    def walk(self):
        yield self
        yield from self.child.walk()


_OPS: dict[str, Callable] = {"mul": operator.mul, "add": operator.add, "sub": operator.sub}


class Compute(EpilogueNode):
    """An elementwise function of its children, named so that the cache key is exact (``"mul"``, ``"add"``...)."""

    def __init__(self, op: str, *children: EpilogueNode):
        if op not in _OPS:
            raise ValueError(f"Compute op must be one of {sorted(_OPS)}; got {op!r}")
        self.op, self.children = op, children
        self.operands = tuple(name for c in children for name in c.operands)

    @property
    def key(self):
        return (self.op,) + tuple(c.key for c in self.children)

    def visit(self, ctx):
        values = [c.visit(ctx) for c in self.children]
        out = values[0]
        for v in values[1:]:
            out = _OPS[self.op](out, v)
        return out

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()
