"""CPU tier of the per-stream scratch buffers (cute_kernels.streams.StreamScratch)."""

import torch

from cute_kernels.streams import StreamScratch, current_stream_id

CPU = torch.device("cpu")


def test_cpu_tensors_share_one_implicit_stream():
    assert current_stream_id(CPU) == 0


def test_buffers_are_reused_grown_and_zeroed_on_request():
    s = StreamScratch()
    a = s.get(CPU, "partials", 100, min_numel=256)
    assert a.numel() == 256 and a.dtype == torch.int32
    a.fill_(7)
    assert s.get(CPU, "partials", 200).data_ptr() == a.data_ptr()  # fits: reused as it is, not cleared
    b = s.get(CPU, "partials", 300, grow=2)
    assert b.numel() == 512 and b.data_ptr() != a.data_ptr()
    c = s.get(CPU, "counters", 10, zeroed=True)
    assert not c.any()
    c.fill_(1)
    d = s.get(CPU, "counters", 20, zeroed=True)  # a replacement is zero-filled again
    assert d.numel() == 20 and not d.any()
    f = s.get(CPU, "partials", 8, torch.float32)  # another dtype is another buffer
    assert f.dtype == torch.float32 and f.data_ptr() != b.data_ptr()
    assert s.nbytes() == (512 + 20 + 8) * 4
    s.clear()
    assert s.nbytes() == 0 and s.buffers() == []


def test_current_peeks_without_allocating():
    s = StreamScratch()
    assert s.current(CPU, "p2p_own", torch.float32) is None and s.nbytes() == 0
    a = s.get(CPU, "p2p_own", 64, torch.float32)
    assert s.current(CPU, "p2p_own", torch.float32) is a
    b = s.get(CPU, "p2p_own", 128, torch.float32)  # grown: the replacement is what current() sees
    assert s.current(CPU, "p2p_own", torch.float32) is b and b.data_ptr() != a.data_ptr()
    assert s.current(CPU, "p2p_own", torch.bfloat16) is None
