"""The per-chunk GEMMs the matmul + reduce-scatter pipeline can plug in.

Contract of a chunk GEMM ``gemm(a, b, a_scale, b_scale, bias, out, c=None)``:
    a        int8 [L, m, K]   this chunk's rows of the L = W row blocks of x1 (row stride K, block stride Mr * K)
    b        int8 [K, N]      this rank's weight shard, shared by all L blocks
    a_scale  fp32 [L, m]      the matching per-token scales
    b_scale  fp32 [N]         per-channel scales
    bias     int32 [N] | None only passed on the rank that owns the bias (see matmul_reduce_scatter)
    out      [L, m, N]        contiguous, in the reduce dtype; fully overwritten with
                              out[l, i, j] = (sum_k a[l, i, k] * b[k, j] + bias[j]) * a_scale[l, i] * b_scale[j]
                                             (+ c[l, i, j])
    c        [L, m, N] | None another rank's partial to add (the p2p transport's own block): out is then the
                              final output, in out's dtype
and ``gemm.check(x1, x2)`` raises TypeError/ValueError for operands this GEMM cannot run. ``gemm.fuses_bias``
(default False) says the bias and ``c`` may come together (the bias enters before ``c`` is added, in one pass);
without it the p2p transport keeps the bias rank's sum unfused. The op calls ``check`` on
every rank before its first collective, so a shape the kernel would reject becomes an error on all ranks instead of an
exception on one rank while the others wait in a collective. ``gemm.row_align`` is the row granularity chunk
boundaries keep (GEMM tile rows, 16-byte aligned scale slices). Optionally, ``gemm.run_block(a, b, a_scale, b_scale,
bias, out, c=None)`` takes one block as 2-D operands (a [m, K], a_scale [m], out and c [m, N]); the p2p transport
calls it through ``run_block`` below, which falls back to the batched call with L = 1.
"""

from __future__ import annotations

import torch

from .. import checks


class ReferenceChunkGemm:
    """Float64 math on any device: the CPU/gloo path and the ground truth. Exact up to the final cast to ``out``."""

    row_align = 1
    fuses_bias = True

    def check(self, x1: torch.Tensor, x2: torch.Tensor) -> None:
        pass

    def __call__(self, a, b, a_scale, b_scale, bias, out, c=None) -> None:
        # float64 holds every int8 x int8 dot product exactly for K < 2^38, and the int32 bias too.
        acc = torch.matmul(a.double(), b.double())
        if bias is not None:
            acc += bias.double()
        acc *= a_scale.double().unsqueeze(-1)
        acc *= b_scale.double()
        if c is not None:
            acc += c.double()
        out.copy_(acc)


class Int8ScaledMmChunkGemm:
    """The library's int8 GEMM (``cute_kernels.int8_scaled_mm``) with its dequantizing epilogue, on the current stream.

    One launch per row block: the 2-D form of ``int8_scaled_mm`` takes exactly these operands (a K-contiguous
    [m, K] slice, its [m] scale slice, an [m, N] slice of ``out``). A single batched launch over L needs the batched
    form to take a per-(block, row) scale [L, m] and a weight shared by all blocks.

    The int32 bias goes to the kernel as is: an int32 bias selects the epilogue variant that adds it to the
    accumulator before the scales, (acc + bias) * sa * sb - the seed's rule - in the same pass (until session 11 it was
    an fp32 rank-1 update, out += sa (x) (bias * sb), one more pass over the bias rank's partial, which also kept
    that rank off the fused sum of the p2p transport).
    """

    row_align = 128
    fuses_bias = True

    def __init__(self, sm_count: int | None = None, mm=None):
        """sm_count: SMs the persistent GEMM may occupy (default: all). A persistent GEMM holding every SM starves the
        NCCL kernels of the concurrent reduce-scatter; leaving a few SMs free lets both run (needs int8_scaled_mm's
        ``sm_count`` parameter). mm: the function called (default ``int8_scaled_mm``; tests pass its reference)."""
        if mm is None:
            from ..ops.int8_scaled_mm import int8_scaled_mm as mm  # here, so the CPU path needs nothing GPU-side

        self._mm = mm
        self._options = {} if sm_count is None else {"sm_count": sm_count}

    def check(self, x1: torch.Tensor, x2: torch.Tensor) -> None:
        checks.check_cuda({"x1": x1, "x2": x2})
        if x1.shape[1] < 16:
            raise ValueError(f"K (x1.shape[1], this rank's shard) = {x1.shape[1]} must be >= 16 on the GPU")
        checks.check_multiple("K (x1.shape[1], this rank's shard)", x1.shape[1], 16,
                              "int8 rows must be 16-byte aligned for TMA")
        checks.check_multiple("N (x2.shape[1])", x2.shape[1], 8, "output rows must be 16-byte aligned")
        if x2.shape[1] > 1 and x2.stride(0) != 1:
            raise ValueError(
                f"x2 must be column-major on the GPU (x2.stride(0) == 1, i.e. x2 = w.t() of a row-major [N, K] "
                f"weight shard); got strides {tuple(x2.stride())} for shape {tuple(x2.shape)}")
        checks.check_aligned("x1", x1)
        checks.check_aligned("x2", x2)

    def __call__(self, a, b, a_scale, b_scale, bias, out, c=None) -> None:
        for block in range(a.shape[0]):
            self.run_block(a[block], b, a_scale[block], b_scale, bias, out[block], None if c is None else c[block])

    def run_block(self, a, b, a_scale, b_scale, bias, out, c=None) -> None:
        """One row block, 2-D operands (a [m, K], a_scale [m], out and c [m, N]): the call without the per-block
        views of ``__call__``, which cost the p2p transport's host path a few µs each (module ``run_block``)."""
        if c is None:
            self._mm(a, b, a_scale, b_scale, bias, out_dtype=out.dtype, out=out, **self._options)
        else:
            self._mm(a, b, a_scale, b_scale, bias, out_dtype=out.dtype, out=out, c=c, **self._options)


class TorchIntMmChunkGemm:
    """``torch._int_mm`` (cuBLASLt int8 -> int32) followed by the dequantizing epilogue in torch.

    The baseline a user has without our kernel, and a stand-in that lets the pipeline run where ours is not built.
    cuBLASLt needs K and N multiples of 8 and refuses m <= 16: such short chunks are zero-padded to 17 rows.
    """

    row_align = 128
    fuses_bias = True

    def check(self, x1: torch.Tensor, x2: torch.Tensor) -> None:
        checks.check_cuda({"x1": x1, "x2": x2})
        checks.check_multiple("K (x1.shape[1], this rank's shard)", x1.shape[1], 8, "torch._int_mm needs K % 8 == 0")
        checks.check_multiple("N (x2.shape[1])", x2.shape[1], 8, "torch._int_mm needs N % 8 == 0")

    def __call__(self, a, b, a_scale, b_scale, bias, out, c=None) -> None:
        rows = a.shape[1]
        for block in range(a.shape[0]):
            if rows > 16:
                acc = torch._int_mm(a[block], b)
            else:
                padded = a.new_zeros(17, a.shape[2])
                padded[:rows] = a[block]
                acc = torch._int_mm(padded, b)[:rows]
            if bias is not None:
                acc += bias
            if c is None:
                torch.mul(acc * a_scale[block].unsqueeze(-1), b_scale, out=out[block])
            else:
                torch.add(acc * a_scale[block].unsqueeze(-1) * b_scale, c[block], out=out[block])


def run_block(gemm, a, b, a_scale, b_scale, bias, out, c=None) -> None:
    """``gemm`` on one row block given as 2-D operands (a [m, K], a_scale [m], out and c [m, N]): its ``run_block``
    where it has one (no per-call batch views to build), else the contract's batched call with L = 1."""
    fast = getattr(gemm, "run_block", None)
    if fast is not None:
        fast(a, b, a_scale, b_scale, bias, out, c=c)
    else:
        gemm(a[None], b, a_scale[None], b_scale, bias, out[None], c=None if c is None else c[None])
