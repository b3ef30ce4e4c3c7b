"""A lock-step SIMT emulator of the weight-only kernel's per-thread code, for the CPU test tier.

The kernel's data path (``WeightOnlyGemm.load_weights`` / ``mma_step``, the formats' decode, the activation
fragments) is plain trace-time Python calling ``cute_kernels.weight_only.ptx``. Here every PTX helper is replaced by
a numpy implementation operating on *lane vectors* (arrays of 32 values, one per thread of a warp) and the
``mma.sync`` fragments are assembled across lanes with the PTX ISA slot layout. Running the kernel's own Python over
those vectors checks, without a GPU: the magic-number constants, the pairing of weight and activation K positions,
the fragment slot mapping, group-scale / zero-point indexing, K/N/M predication and the host ops' padding and AWQ
repack. What it cannot check is the DSL lowering itself (the GPU tier does).

Only the two ``@cute.jit`` pieces (the K-step loop and the epilogue) are re-stated here, in ``run_kernel``.
"""

from __future__ import annotations

import contextlib
import types

import numpy as np
import torch

from cute_kernels.weight_only import formats as fmt_mod
from cute_kernels.weight_only import kernel as kernel_mod
from cute_kernels.weight_only import ptx as ptx_mod

LANES = 32
_rng = np.random.default_rng(1234)
_ring: list = [None]  # the shared-memory ring of the CTA being emulated


# ------------------------------------------------------------------------------------------------ lane arithmetic
def u32(v) -> np.ndarray:
    return (np.asarray(v, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32)


def _halves(v: np.ndarray, ty: str) -> tuple[np.ndarray, np.ndarray]:
    v = u32(v)
    lo, hi = (v & 0xFFFF).astype(np.uint16), (v >> 16).astype(np.uint16)
    if ty.startswith("f16"):
        return lo.view(np.float16).astype(np.float64), hi.view(np.float16).astype(np.float64)
    return ((lo.astype(np.uint32) << 16).view(np.float32).astype(np.float64),
            (hi.astype(np.uint32) << 16).view(np.float32).astype(np.float64))


def _round16(x: np.ndarray, ty: str) -> np.ndarray:
    """float64 -> 16-bit pattern, round to nearest even (bf16 via an exact f32 step where it matters here)."""
    if ty.startswith("f16"):
        return np.asarray(x, dtype=np.float64).astype(np.float16).view(np.uint16).astype(np.uint32)
    b = np.asarray(x, dtype=np.float64).astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint32)


def _pack(lo, hi, ty):
    return u32(_round16(lo, ty) | (_round16(hi, ty) << 16))


def lop3(a, b, c, lut):
    a, b, c = u32(a), u32(np.broadcast_to(b, np.shape(a))), u32(np.broadcast_to(c, np.shape(a)))
    out = np.zeros_like(a)
    for k in range(8):
        if lut >> k & 1:
            ta = a if k & 4 else ~a
            tb = b if k & 2 else ~b
            tc = c if k & 1 else ~c
            out |= ta & tb & tc
    return u32(out)


def prmt(a, b, sel):
    a, b = u32(a), u32(np.broadcast_to(b, np.shape(a)))
    both = (a.astype(np.uint64) | (b.astype(np.uint64) << 32))
    out = np.zeros(a.shape, dtype=np.uint64)
    for i in range(4):
        nib = (sel >> (4 * i)) & 0xF
        assert nib < 8, "sign-replicate prmt mode is not emulated"
        out |= ((both >> np.uint64(8 * nib)) & np.uint64(0xFF)) << np.uint64(8 * i)
    return u32(out)


def fma_x2(ty, a, b, c):
    (al, ah), (bl, bh), (cl, ch) = _halves(a, ty), _halves(b, ty), _halves(c, ty)
    return _pack(al * bl + cl, ah * bh + ch, ty)


def f32_from_bits(v):
    return u32(v).view(np.float32)


def cvt_pair_f32(ty, hi, lo):
    return _pack(np.asarray(lo, np.float64), np.asarray(hi, np.float64), ty)


def split_bf16_pair(x_lo, x_hi):
    hi = cvt_pair_f32("bf16x2", x_hi, x_lo)
    hl, hh = _halves(hi, "bf16x2")
    rl = (np.asarray(x_lo, np.float32) - hl.astype(np.float32)).astype(np.float32)
    rh = (np.asarray(x_hi, np.float32) - hh.astype(np.float32)).astype(np.float32)
    return hi, cvt_pair_f32("bf16x2", rh, rl)


class Memory:
    """A flat byte space holding the kernel's global tensors at 256-byte aligned addresses."""

    def __init__(self):
        self.buf = bytearray(256)

    def place(self, arr: np.ndarray) -> int:
        addr = len(self.buf)
        raw = np.ascontiguousarray(arr).view(np.uint8).tobytes()
        self.buf += raw + bytes((-len(raw)) % 256 + 256)
        return addr

    def load(self, addr, pred, nwords, zero_fill, offset=0):
        addr = np.asarray(addr, np.int64) + offset
        pred = np.broadcast_to(np.asarray(pred, bool), np.shape(addr))
        # "undefined" registers get random bits: the kernel must not depend on them
        words = [np.zeros(LANES, np.uint32) if zero_fill else u32(_rng.integers(0, 2**32, LANES))
                 for _ in range(nwords)]
        for lane in np.nonzero(pred)[0]:
            a = int(addr[lane])
            assert a % (4 * nwords) == 0, f"misaligned {4 * nwords}-byte load at {a:#x}"
            assert 256 <= a and a + 4 * nwords <= len(self.buf), "out-of-bounds load"
            vals = np.frombuffer(bytes(self.buf[a:a + 4 * nwords]), dtype=np.uint32)
            for i in range(nwords):
                words[i][lane] = vals[i]
        return words


class SharedRing:
    """A CTA's shared memory for the cp.async weight ring; cp.async lands at once (the wait is a no-op here)."""

    def __init__(self, nbytes: int, memory: Memory):
        self.buf = bytearray(nbytes)
        self.memory = memory

    def cp_async_16(self, smem_addr, gmem_addr, pred, offset=0):
        smem_addr = np.broadcast_to(np.asarray(smem_addr, np.int64) + offset, (LANES,))
        words = self.memory.load(gmem_addr, pred, 4, zero_fill=True)
        for lane in range(LANES):
            a = int(smem_addr[lane])
            assert a % 16 == 0 and 0 <= a and a + 16 <= len(self.buf), f"bad shared address {a}"
            self.buf[a:a + 16] = np.array([w[lane] for w in words], np.uint32).tobytes()

    def ld_shared_v4(self, smem_addr, offset=0):
        smem_addr = np.broadcast_to(np.asarray(smem_addr, np.int64) + offset, (LANES,))
        out = [np.zeros(LANES, np.uint32) for _ in range(4)]
        for lane in range(LANES):
            a = int(smem_addr[lane])
            vals = np.frombuffer(bytes(self.buf[a:a + 16]), dtype=np.uint32)
            for i in range(4):
                out[i][lane] = vals[i]
        return out


def mma(ab_type, a, b, c):
    ty = ab_type + "x2"
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    C = np.zeros((16, 8))
    for lane in range(LANES):
        g, t = lane // 4, lane % 4
        for reg, (r, k) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
            lo, hi = _halves(a[reg][lane], ty)
            A[r, k], A[r, k + 1] = lo, hi
        for reg, k in enumerate((2 * t, 2 * t + 8)):
            lo, hi = _halves(b[reg][lane], ty)
            B[k, g], B[k + 1, g] = lo, hi
        # a scalar C (promoted scales start each step from 0.0) is the same in every lane
        C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1] = (
            np.float64(np.broadcast_to(c[i], (LANES,))[lane]) for i in range(4))
    D = (A @ B + C).astype(np.float32)
    out = [np.zeros(LANES, np.float32) for _ in range(4)]
    for lane in range(LANES):
        g, t = lane // 4, lane % 4
        out[0][lane], out[1][lane], out[2][lane], out[3][lane] = D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], \
            D[g + 8, 2 * t + 1]
    return out


# ------------------------------------------------------------------------------------------------ mock tensors
class _Value:
    def __init__(self, arr):
        self.arr = arr

    def to(self, _dtype):
        return self.arr.astype(np.float32)


class MockTensor:
    """What the kernel's plain-Python code reads of a cute.Tensor: shape, stride, base address, element loads."""

    def __init__(self, t: torch.Tensor, mem: Memory):
        self.np = t.cpu().contiguous().view(torch.int16).numpy().view(np.float16).view(np.uint16) \
            if t.dtype == torch.bfloat16 else t.cpu().contiguous().numpy()
        self.torch_dtype = t.dtype
        self.shape = tuple(t.shape)
        self.stride = tuple(t.contiguous().stride())
        self.addr = mem.place(self.np)
        self.iterator = types.SimpleNamespace(toint=lambda: self.addr)

    def __getitem__(self, idx):
        r, c = idx
        vals = self.np[np.asarray(r), np.asarray(c)]
        if self.torch_dtype == torch.bfloat16:
            vals = (vals.astype(np.uint32) << 16).view(np.float32)
        return _Value(np.broadcast_to(vals, (LANES,)).copy())


class Regs:
    """An rmem tensor of lane vectors."""

    def __init__(self, n, dtype):
        self.v = [np.zeros(LANES, dtype) for _ in range(n)]

    def __getitem__(self, i):
        return self.v[i]

    def __setitem__(self, i, val):
        self.v[i] = np.asarray(val).copy()


@contextlib.contextmanager
def emulated(memory: Memory):
    """Swap the PTX helpers and DSL scalar constructors of the kernel modules for the lane-vector versions."""
    fake_ptx = dict(
        lop3=lambda a, b, c, lut: lop3(a, b, c, lut), lop3_rrc=lambda a, b, c, lut: lop3(a, b, c, lut),
        shr=lambda a, n: a if n == 0 else u32(u32(a) >> np.uint32(n)),
        shl=lambda a, n: a if n == 0 else u32(u32(a).astype(np.uint64) << np.uint64(n)),
        prmt=prmt, prmt_c=prmt, xor_c=lambda a, c: u32(u32(a) ^ np.uint32(c)),
        splat_or=lambda v, c: u32((u32(v).astype(np.uint64) * 0x10001) | c),
        fma_x2=fma_x2, fma_x2_cc=fma_x2, fma_x2_rc=fma_x2, fma_x2_cr=fma_x2,
        cvt_pair_f32=cvt_pair_f32, f32_from_bits=f32_from_bits, split_bf16_pair=split_bf16_pair,
        f16x2_to_f32=lambda v: tuple(np.asarray(h, np.float32) for h in _halves(v, "f16x2")),
        ld_global=lambda addr, pred, nwords, streaming, zero_fill=True, offset=0, read_only=True:
            memory.load(addr, pred, nwords, zero_fill, offset),
        mma_m16n8k16=mma,
        cp_async_16=lambda *a, **k: _ring[0].cp_async_16(*a, **k),
        ld_shared_v4=lambda *a, **k: _ring[0].ld_shared_v4(*a, **k),
        cp_async_commit=lambda: None, cp_async_wait=lambda n: None)
    fake_cutlass = types.SimpleNamespace(min=np.minimum)
    saved = {name: getattr(ptx_mod, name) for name in fake_ptx}
    saved_k = {n: getattr(kernel_mod, n) for n in ("Int64", "Uint32", "Float32", "cutlass", "group_of")}
    saved_f = fmt_mod.Float32
    try:
        for name, fn in fake_ptx.items():
            setattr(ptx_mod, name, fn)
        kernel_mod.Int64 = lambda v: np.asarray(v, dtype=np.int64)
        kernel_mod.Uint32 = lambda v: u32(v.arr if isinstance(v, _Value) else v)
        kernel_mod.cutlass = fake_cutlass
        # the same multiply-and-shift as kernel.group_of, on int64 lane vectors
        kernel_mod.group_of = (lambda k, mul: (np.asarray(k, dtype=np.int64) >> 5) * int(mul)
                               >> kernel_mod.GROUP_MUL_SHIFT)
        kernel_mod.Float32 = np.float32
        fmt_mod.Float32 = np.float32
        yield
    finally:
        for name, fn in saved.items():
            setattr(ptx_mod, name, fn)
        for n, v in saved_k.items():
            setattr(kernel_mod, n, v)
        fmt_mod.Float32 = saved_f


def _step_buffers(k) -> dict:
    """``StepOperands.buffers()`` as emulator registers."""
    ops = k.step_operands()
    buf = {"x": Regs(ops.x_words, np.uint32)}
    if ops.params:
        buf["s"] = Regs(ops.params, np.float32)
        if ops.zeros:
            buf["z"] = Regs(ops.params, np.uint32)
    return buf


def _advance(cur: dict, nxt: dict) -> None:
    if cur is not nxt:
        for name, regs in cur.items():
            regs.v = [v.copy() for v in nxt[name].v]


def run_kernel(k: "kernel_mod.WeightOnlyGemm", x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, scale: float,
               group_scales, zeros, group: int, bias=None) -> None:
    """Emulate one launch of ``k`` on CPU tensors, writing ``out`` in place (same arguments as the compiled fn)."""
    mem = Memory()
    X, W = MockTensor(x, mem), MockTensor(w, mem)
    GS = None if group_scales is None else MockTensor(group_scales, mem)
    Z = None if zeros is None else MockTensor(zeros, mem)
    tile = k.tile
    group = kernel_mod.group_multiplier(group)  # what the launch hands the kernel in place of the group size
    M, N = x.shape[0], w.shape[0]
    n_steps = -(-w.shape[1] // 64)
    lane = np.arange(LANES)
    g, t = lane // 4, lane % 4
    n_acc = tile.nt * tile.mt * 4
    res = np.full(out.shape, np.nan, dtype=np.float64)
    with emulated(mem):
        for bx in range(-(-N // tile.rows_per_cta)):
            for by in range(-(-M // tile.tokens_per_cta)):
                m0 = by * tile.tokens_per_cta
                for wn in range(tile.warps_n):
                    n0 = bx * tile.rows_per_cta + wn * 16 * tile.nt
                    total = [np.zeros(LANES, np.float32) for _ in range(n_acc)]
                    if tile.stages:
                        _ring[0] = SharedRing(tile.ring_bytes, mem)
                    for wk in range(tile.warps_k):  # kernel(): the K-step loop of each warp
                        warp = wk * tile.warps_n + wn
                        th = k.thread_setup(X, W, n0, m0, g, t, out.shape[1] if tile.fragment_order else None)
                        acc = Regs(tile.acc_chains * n_acc, np.float32)
                        wbuf = Regs(tile.vectors * 4, np.uint32)
                        cur = _step_buffers(k)
                        nxt = _step_buffers(k) if tile.x_ahead else cur
                        ahead_k = tile.warps_k if tile.x_ahead else 0  # x_ahead: operands of the next step
                        if tile.preload_weights and tile.stages == 0 and tile.x_ahead:
                            # kernel(): the preload's first step (weights, parameters), then x after the wait
                            k.first_weight_loads(th, wbuf, None, wk, t, W.shape[1])
                            k.load_step_params(th, cur, wk, t, GS, Z, group)
                            k.load_step_x(X, th, cur, wk, t)
                        elif tile.x_ahead:
                            k.load_step_operands(X, th, cur, wk, t, GS, Z, group)
                        if tile.stages == 0 and tile.swap_registers:
                            # unrolled by two: the buffers swap roles (no copy)
                            w_next = Regs(tile.vectors * 4, np.uint32)
                            k.load_weights(th, wbuf, wk, t, W.shape[1])
                            n_mine = (n_steps - wk + tile.warps_k - 1) // tile.warps_k
                            for i in range(max(0, n_mine) // 2):
                                step = wk + 2 * i * tile.warps_k
                                k.load_weights(th, w_next, step + tile.warps_k, t, W.shape[1])
                                k.load_step_operands(X, th, nxt, step + ahead_k, t, GS, Z, group)
                                k.mma_step(X, th, wbuf, cur, acc, step, t)
                                k.load_weights(th, wbuf, step + 2 * tile.warps_k, t, W.shape[1])
                                if tile.x_ahead:
                                    k.load_step_operands(X, th, cur, step + 2 * tile.warps_k, t, GS, Z, group)
                                else:
                                    k.load_step_operands(X, th, cur, step + tile.warps_k, t, GS, Z, group)
                                k.mma_step(X, th, w_next, nxt, acc, step + tile.warps_k, t)
                            if max(0, n_mine) % 2:
                                step = wk + (n_mine - 1) * tile.warps_k
                                if not tile.x_ahead:
                                    k.load_step_operands(X, th, cur, step, t, GS, Z, group)
                                k.mma_step(X, th, wbuf, cur, acc, step, t)
                        elif tile.stages == 0:
                            w_next = Regs(tile.vectors * 4, np.uint32)
                            if not (tile.preload_weights and tile.x_ahead):
                                k.load_weights(th, wbuf, wk, t, W.shape[1])
                            for step in range(wk, n_steps, tile.warps_k):
                                k.load_weights(th, w_next, step + tile.warps_k, t, W.shape[1])
                                k.load_step_operands(X, th, nxt, step + ahead_k, t, GS, Z, group)
                                k.mma_step(X, th, wbuf, cur, acc, step, t)
                                wbuf.v = [v.copy() for v in w_next.v]
                                _advance(cur, nxt)
                        else:
                            slot0 = (warp * 32 + lane) * 16
                            for i in range(tile.stages - 1):
                                k.issue_weights(th, slot0, i, wk + i * tile.warps_k, t, W.shape[1])
                            n_iter = (n_steps - wk + tile.warps_k - 1) // tile.warps_k
                            for i in range(max(0, n_iter)):
                                step = wk + i * tile.warps_k
                                k.load_step_operands(X, th, nxt, step + ahead_k, t, GS, Z, group)
                                k.read_ring(wbuf, slot0, i % tile.stages)
                                ahead = i + tile.stages - 1
                                k.issue_weights(th, slot0, ahead % tile.stages, wk + ahead * tile.warps_k, t,
                                                W.shape[1])
                                k.mma_step(X, th, wbuf, cur, acc, step, t)
                                _advance(cur, nxt)
                        for c in range(1, tile.acc_chains):  # kernel(): the extra accumulator sets folded in
                            for e in range(n_acc):
                                acc[e] = (acc[e] + acc[c * n_acc + e]).astype(np.float32)
                        for e in range(n_acc):  # epilogue(): the split-K sum
                            total[e] = (total[e] + acc[e]).astype(np.float32)
                    for e in range(n_acc):  # store(): slot e -> (m, n)
                        c, ji = e % 4, e // 4
                        i, j = ji % tile.mt, ji // tile.mt
                        n = n0 + 16 * j + g + 8 * (c // 2)
                        m = m0 + 8 * i + 2 * t + (c % 2)
                        for ln in range(LANES):
                            if m[ln] < M and n[ln] < out.shape[1]:  # (fragment order: w has N16 rows)
                                v = np.float32(total[e][ln]) * np.float32(scale)
                                if bias is not None:  # store(): + bias[n] in fp32, one rounding
                                    v = np.float32(v + np.float32(bias[n[ln]].item()))
                                res[m[ln], n[ln]] = v
    out.copy_(torch.from_numpy(res).to(out.dtype))
