"""AwqDequantize: W[i, o] = (q[i, o] - z[i // G, o]) * s[i // G, o] from AutoAWQ tensors, as they are stored.

Layouts (formats/awq.py): qweight int32 [IC, OC/8], qzeros int32 [IC/G, OC/8] (nibble slot p of a word holds column
8j + (0, 2, 4, 6, 1, 3, 5, 7)[p]), scales fp16/bf16 [IC/G, OC]; out [IC, OC] in the scales' dtype. All row-major,
IC, OC, G dynamic.

One thread per int32 word: load the word, its zero word and the 16 bytes of its 8 scales, write 16 bytes. AWQ's
interleave makes slots p and p + 4 the adjacent columns 2p and 2p + 1, so ``(word >> 4p) & 0x000F000F`` is an
output pair in place; with the magic-number decode (see formats.py) each pair costs shift, lop3, one exact packed
subtract of (MAGIC + z) and one packed multiply by the scale pair - the result is (q - z) * s rounded once, bit-equal
to ``awq_dequantize_reference``. Memory-bound: 4 + 16 bytes read (the zero word and scales are shared by the G rows
of a group and mostly hit L2), 16 bytes written per word.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32

from . import ptx
from .formats import BF16, F16, NEG_ZERO2

THREADS = 256


class AwqDequantize:
    def __init__(self, dtype):
        self.dtype = dtype
        self.ct = BF16 if dtype is cutlass.BFloat16 else F16

    @cute.jit
    def __call__(self, qweight: cute.Tensor, qzeros: cute.Tensor, scales: cute.Tensor, out: cute.Tensor,
                 group: Int32, stream):
        words = qweight.shape[0] * qweight.shape[1]
        self.kernel(qweight, qzeros, scales, out, group).launch(
            grid=[(words + THREADS - 1) // THREADS, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, qweight: cute.Tensor, qzeros: cute.Tensor, scales: cute.Tensor, out: cute.Tensor,
               group: Int32):
        ct = self.ct
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        cols = qweight.shape[1]
        idx = bidx * THREADS + tidx
        i = idx // cols
        j = idx % cols
        live = i < qweight.shape[0]
        ii = cutlass.min(i, qweight.shape[0] - 1)  # dead threads read row IC-1 and store nothing
        gi = ii // group
        q = Uint32(qweight[ii, j])
        z = Uint32(qzeros[gi, j])
        s_addr = scales.iterator.toint() + (Int64(gi) * scales.stride[0] + Int64(j * 8)) * 2
        s = ptx.ld_global(s_addr, live, 4, streaming=False)
        res = []
        for p in cutlass.range_constexpr(4):
            qh = ptx.lop3(ptx.shr(q, 4 * p), 0x000F000F, ct.pair(ct.magic), ptx.LUT_AND_OR)
            zh = ptx.lop3(ptx.shr(z, 4 * p), 0x000F000F, ct.pair(ct.neg(ct.magic)), ptx.LUT_AND_OR)
            diff = ptx.fma_x2_cr(ct.x2, qh, ct.pair(ct.one), zh)  # (MAGIC + q) - (MAGIC + z), exact
            res.append(ptx.fma_x2_rc(ct.x2, diff, s[p], NEG_ZERO2))
        o_addr = out.iterator.toint() + (Int64(ii) * out.stride[0] + Int64(j * 8)) * 2
        ptx.st_global_v4(o_addr, res, live)
