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


def test_generation_tracks_every_change_and_put_plants_buffers():
    s = StreamScratch()
    g0 = s.generation
    a = s.get(CPU, "partials", 100)
    assert s.generation == g0 + 1
    s.get(CPU, "partials", 50)  # reused: no change
    assert s.generation == g0 + 1
    planted = torch.zeros(8, dtype=torch.int32)
    assert s.put(CPU, "partials", planted) is a and s.generation == g0 + 2
    assert s.get(CPU, "partials", 8) is planted
    assert s.put(CPU, "partials", None) is planted and s.current(CPU, "partials") is None
    s.clear()
    assert s.generation == g0 + 4


def test_split_workspace_memo_follows_the_scratch():
    """split_workspace answers repeat calls from its memo, and sees a planted or grown buffer at once."""
    from cute_kernels.ops import split_k

    ws, sem = split_k.split_workspace(CPU, 1000, 10, torch.float32)
    assert ws.dtype == torch.float32 and ws.numel() >= 1000 and sem.numel() >= 10 and not sem.any()
    again = split_k.split_workspace(CPU, 500, 5, torch.float32)
    assert again[0] is ws and again[1] is sem  # the memo: same objects, no new view
    planted = torch.zeros(64, dtype=torch.int32)
    old = split_k.SCRATCH.put(CPU, "semaphores", planted)
    assert split_k.split_workspace(CPU, 500, 5, torch.float32)[1] is planted
    split_k.SCRATCH.put(CPU, "semaphores", old)
    big_ws, _ = split_k.split_workspace(CPU, 1 << 20, 5, torch.float32)  # larger than the memo's: grown
    assert big_ws.numel() >= 1 << 20
    ints, _ = split_k.split_workspace(CPU, 10, 5)  # int32: the same words, its own memo entry
    assert ints.dtype == torch.int32 and ints.data_ptr() == big_ws.data_ptr()
