"""An epilogue tree: a root node plus the ordered list of global operands it reads."""

from __future__ import annotations

from .nodes import (Accumulator, ColVector, Compute, EpilogueNode, Matrix, Prefetched, RowVector, Scalar,
                    ZeroPointAccumulator)


class EpilogueTree:
    def __init__(self, root: EpilogueNode, operand_order: tuple[str, ...] | None = None):
        """``operand_names`` - the order in which a kernel's launch passes the global operands - is the tree's walk
        order unless ``operand_order`` fixes it (it must name exactly the operands the tree reads), so that one
        launch signature serves variants whose nodes nest differently."""
        self.root = root
        names: list[str] = []
        for node in root.walk():
            for name in node.operands:
                if name not in names:
                    names.append(name)
        if operand_order is not None:
            if sorted(operand_order) != sorted(names):
                raise ValueError(f"operand_order {operand_order} must name exactly the tree's operands {names}")
            names = list(operand_order)
        self.operand_names = tuple(names)

    @property
    def key(self) -> tuple:
        return self.root.key

    def visit(self, ctx):
        return self.root.visit(ctx)

    def fetch(self, ctx) -> dict:
        """Every global operand's values for the fragment ``ctx``, their loads issued now: {node.fetch_key: values}.
        A kernel passes them back as ``ctx.fetched`` when it visits that fragment (software pipelining of the
        epilogue's loads: issue sub-tile e + 1's before finishing sub-tile e)."""
        return {node.fetch_key: node.load(ctx) for node in self.root.walk() if isinstance(node, Prefetched)}

    def __repr__(self):
        return f"EpilogueTree({self.key})"


BIAS_KINDS = (None, "out", "acc")
# Activation zero points (``ZeroPointAccumulator``): None, one folded into azp_adj ("tensor"), one per token ("token").
ZERO_POINT_KINDS = (None, "tensor", "token")


def bias_kind(bias) -> str | None:
    """Normalize a bias flag: None / False (no bias), True / "out" (added after scaling), "acc" (added to the
    accumulator before scaling)."""
    if bias is None or bias is False:
        return None
    if bias is True:
        return "out"
    if bias not in BIAS_KINDS:
        raise ValueError(f"bias kind must be one of {BIAS_KINDS} (or a bool); got {bias!r}")
    return bias


def zero_point_kind(azp_adj, azp) -> str | None:
    """The ``ZERO_POINT_KINDS`` entry a call's zero-point tensors select: None, "tensor" (azp_adj alone) or "token"
    (both); azp without azp_adj is a kind no variant has (the op refuses it, and its plan caches never match it)."""
    if azp_adj is None:
        return None if azp is None else "azp without azp_adj"
    return "tensor" if azp is None else "token"


def present_operands(*operands) -> tuple:
    """The epilogue operands a variant reads, in the tree's launch order: the absent ones arrive as None at the launch
    functions (plain Python, so their tracing sees a fixed tuple)."""
    return tuple(t for t in operands if t is not None)


def scaled_mm_tree(row_scale: str | None, col_scale: str | None, bias, swap_ab: bool = False,
                   source: bool = False, zero_point: str | None = None) -> EpilogueTree:
    """The dequantizing epilogue of a scaled GEMM: ``acc * a_scale * b_scale (+ bias) (+ c)``, or with an
    accumulator-domain bias ``(acc + bias) * a_scale * b_scale (+ c)``.

    row_scale: kind of the per-output-row scale ``a_scale`` ("vector" for [M], "scalar" for [1], None for absent);
    col_scale: same for the per-output-column ``b_scale``; bias (``bias_kind``): a per-column ``bias`` vector added
    after the scales ("out", or True) or to the accumulator before them ("acc": e.g. an int32 bias of a quantized
    linear, or a zero-point correction; the sum is taken in fp32, like the accumulator's own conversion).
    swap_ab: the kernel computes the transposed problem (its m is the output's n), so the roles of the
    row and column broadcasts swap; the operand names stay the user's.
    source: a full [M, N] operand ``c`` is added last (the kernel passes it in its own coordinates).
    zero_point (``ZERO_POINT_KINDS``): asymmetric activations - the accumulator loses ``azp_adj[n]`` ("tensor") or
    ``azp[m] * azp_adj[n]`` ("token") in int32 before anything else (``ZeroPointAccumulator``).
    """
    if zero_point not in ZERO_POINT_KINDS:
        raise ValueError(f"zero_point must be one of {ZERO_POINT_KINDS}; got {zero_point!r}")
    row_node, col_node = (RowVector, ColVector) if swap_ab else (ColVector, RowVector)
    where = bias_kind(bias)
    node: EpilogueNode = Accumulator()
    if zero_point is not None:
        node = ZeroPointAccumulator("azp_adj", "azp" if zero_point == "token" else None, swap_ab=swap_ab)
    if where == "acc":
        node = Compute("add", node, col_node("bias"))
    for name, kind, vec_node in (("a_scale", row_scale, row_node), ("b_scale", col_scale, col_node)):
        if kind is None:
            continue
        node = Compute("mul", node, Scalar(name) if kind == "scalar" else vec_node(name))
    if where == "out":
        node = Compute("add", node, col_node("bias"))
    if source:
        node = Compute("add", node, Matrix("c"))
    # The launch passes (a_scale, b_scale, bias, azp_adj, azp, c) in this order whatever the nesting.
    order = tuple(name for name, present in (("a_scale", row_scale), ("b_scale", col_scale), ("bias", where),
                                             ("azp_adj", zero_point), ("azp", zero_point == "token"),
                                             ("c", source)) if present)
    return EpilogueTree(node, operand_order=order)
