"""The fragment order of AWQ's repack (cute_kernels/weight_only/fragment_order.py), on the CPU."""

import pytest
import torch

from cute_kernels.formats.awq import awq_quantize, unpack_int4
from cute_kernels.weight_only import awq_repack
from cute_kernels.weight_only.fragment_order import from_fragment_order, padded_shape, to_fragment_order, write_columns


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


@pytest.mark.parametrize("n,row_bytes,cuts", [(40, 200, (0, 64, 192)), (16, 1024, (0, 512)), (33, 80, (0,))])
def test_write_columns_chunk_by_chunk_equals_the_whole_conversion(n, row_bytes, cuts):
    """Blocks of whole K steps written at their first byte (the last one ending mid-step) give the same tensor as
    converting the row-major weight at once."""
    w = torch.randint(0, 256, (n, row_bytes), dtype=torch.uint8)
    wf = torch.full(padded_shape(n, row_bytes), 0, dtype=torch.uint8)
    for c0, c1 in zip(cuts, cuts[1:] + (row_bytes,)):
        write_columns(wf, w[:, c0:c1], c0)
    assert torch.equal(wf, to_fragment_order(w))


def test_write_columns_refuses_blocks_off_a_step_or_past_the_weight():
    wf = torch.zeros(padded_shape(16, 128), dtype=torch.uint8)
    with pytest.raises(ValueError, match="first_byte = 32 must be a multiple of 64"):
        write_columns(wf, torch.zeros(16, 64, dtype=torch.uint8), 32)
    with pytest.raises(ValueError, match="does not fit"):
        write_columns(wf, torch.zeros(16, 96, dtype=torch.uint8), 64)
    with pytest.raises(ValueError, match="does not fit"):
        write_columns(wf, torch.zeros(17, 64, dtype=torch.uint8), 0)


@pytest.mark.parametrize("ic,oc", [(416, 40), (256, 24)])
def test_awq_repack_in_chunks_equals_one_chunk(monkeypatch, ic, oc):
    """The repack writes its chunks of IC rows straight into fragment order: with 128-row chunks (the last one
    partial) it gives the same bytes as with one chunk."""
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc), 32, scale_dtype=torch.float16)
    assert awq_repack.chunk_rows(oc) >= ic
    whole = awq_repack.repack(qweight, scales, qzeros, 32).w
    monkeypatch.setattr(awq_repack, "CHUNK_VALUES", 128 * oc)
    assert awq_repack.chunk_rows(oc) == 128
    assert torch.equal(awq_repack.repack(qweight, scales, qzeros, 32).w, whole)
    rm = from_fragment_order(whole, oc, -(-ic // 32) * 16)
    codes = torch.stack([rm & 0xF, rm >> 4], dim=-1).view(oc, -1)[:, :ic]
    assert torch.equal(codes.long(), unpack_int4(qweight).t().long())


def test_chunk_rows_bound_the_chunk_to_whole_steps_and_its_value_budget():
    assert [awq_repack.chunk_rows(oc) for oc in (64, 4096, 8192, 14336, 28672, 1 << 20)] == [
        2048, 2048, 1024, 512, 256, 128]


@pytest.mark.parametrize("r,oc", [(3, 8), (64, 40), (5, 128)])
def test_unpack_int4_bytes_against_shifts_of_the_words(r, oc):
    """The byte-wise unpack against the words' arithmetic: column 8j + c of row i is nibble AWQ_REVERSE_ORDER[c] of
    word (i, j), i.e. (word >> 4 * slot) & 0xF; unpack_int4 is the same values in int32."""
    from cute_kernels.formats.awq import AWQ_REVERSE_ORDER, unpack_int4_bytes

    packed = torch.randint(-2**31, 2**31 - 1, (r, oc // 8), dtype=torch.int32)
    shifts = torch.tensor([4 * p for p in AWQ_REVERSE_ORDER], dtype=torch.int64)
    want = ((packed.long().unsqueeze(-1) >> shifts) & 0xF).reshape(r, oc)
    got = unpack_int4_bytes(packed)
    assert got.dtype == torch.uint8 and tuple(got.shape) == (r, oc)
    assert torch.equal(got.long(), want)
    assert unpack_int4(packed).dtype == torch.int32 and torch.equal(unpack_int4(packed).long(), want)
