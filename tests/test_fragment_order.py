"""The fragment order of AWQ's repack (cute_kernels/weight_only/fragment_order.py), on the CPU."""

import pytest
import torch

from cute_kernels.formats.awq import awq_quantize, unpack_int4
from cute_kernels.weight_only import awq_repack
from cute_kernels.weight_only.fragment_order import from_fragment_order, padded_shape, to_fragment_order


@pytest.mark.parametrize("n,row_bytes", [(16, 64), (40, 80), (33, 200), (128, 1024)])
def test_fragment_order_round_trip_and_padding(n, row_bytes):
    w = torch.randint(0, 256, (n, row_bytes), dtype=torch.uint8)
    wf = to_fragment_order(w)
    assert tuple(wf.shape) == padded_shape(n, row_bytes) == (-(-n // 16) * 16, -(-row_bytes // 64) * 64)
    assert torch.equal(from_fragment_order(wf, n, row_bytes), w)
    assert int(wf.sum()) == int(w.sum())  # the padding is zeros


def test_fragment_order_puts_each_lane_s_vector_where_the_kernel_reads_it():
    """Byte (n, s * 64 + t * 16 + b) lands at tile n // 16, step s, half (n % 16) // 8, lane (n % 8) * 4 + t: the 1 KB
    block (tile * steps + s) holds rows g then g + 8, 16 bytes per lane (kernel.thread_setup's addressing)."""
    n, row_bytes = 48, 192
    w = torch.arange(n * row_bytes, dtype=torch.int64).remainder(251).to(torch.uint8).view(n, row_bytes)
    flat = to_fragment_order(w).view(-1)
    steps = row_bytes // 64
    for row, s, t, b in ((0, 0, 0, 0), (9, 1, 2, 5), (31, 2, 3, 15), (40, 0, 1, 7)):
        lane = (row % 8) * 4 + t
        at = ((row // 16) * steps + s) * 1024 + ((row % 16) // 8) * 512 + lane * 16 + b
        assert flat[at] == w[row, s * 64 + t * 16 + b], (row, s, t, b)


@pytest.mark.parametrize("ic,oc", [(256, 64), (384, 40), (160, 24)])
def test_awq_repack_is_fragment_ordered_k_packed_nibbles(ic, oc):
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc), 32, scale_dtype=torch.float16)
    kw = awq_repack.repack(qweight, scales, qzeros, 32)
    assert tuple(kw.w.shape) == padded_shape(oc, -(-ic // 32) * 16) and kw.out_features == oc
    rm = kw.row_major()
    codes = torch.stack([rm & 0xF, rm >> 4], dim=-1).view(oc, -1)[:, :ic]  # low nibble = even k
    assert torch.equal(codes.long(), unpack_int4(qweight).t().long())
