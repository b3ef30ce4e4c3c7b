"""GPU fuzz tier: random problems through every op's public entry, against the float64 references.

The other GPU files pin the shapes someone thought of. These draw the rest from a seeded generator: M, N, K, batch,
dtypes, scale kinds and layouts, bias kinds, group sizes, bit widths, and operands and outputs that are views into
wider buffers (a row stride larger than the row). Every output lives inside a NaN-filled buffer with guard rows and
columns around it (a strided view for int8 / FP8, whose `out` may be one; a contiguous block between guard elements
for the weight-only ops, whose `out` must be contiguous): an element the kernel skips fails, and so does a store into
the guards (a tile writing past N or past the last row). Each case runs twice with fresh activations into the same
output, so the warm call paths (plan caches, the AWQ repack cache) are checked against a fresh reference too.

`CUTE_KERNELS_FUZZ_SEED` (fixed by default, so a failure reproduces) and `CUTE_KERNELS_FUZZ_CASES` (per op) widen the
search; each case's parameters are in its failure message.
"""

import os
import random

import pytest
import torch

from cute_kernels import fp8_blockwise_scaled_mm, int8_scaled_mm
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major
from cute_kernels.reference import (awq_gemm_ref, fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref,
                                    quantized_mm_ref)
from cute_kernels.weight_only import awq_gemm, awq_linear, quantized_mm

pytestmark = pytest.mark.gpu

SEED = int(os.environ.get("CUTE_KERNELS_FUZZ_SEED", "20261127"))
CASES = int(os.environ.get("CUTE_KERNELS_FUZZ_CASES", "10"))
F8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _rng(op: str, case: int) -> random.Random:
    return random.Random(f"{SEED}/{op}/{case}")


def _tokens(rng: random.Random) -> int:
    """Decode sizes most often (where the dispatch has the most rows), then mid and large M, odd counts included."""
    lo, hi = rng.choices([(1, 16), (17, 128), (129, 600), (601, 2100)], weights=[40, 25, 25, 10])[0]
    return rng.randint(lo, hi)


def _row_padded(t: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """``t``'s values in a view whose rows are 16-byte multiples longer than the row (stride(-2) > shape[-1])."""
    pad = (16 // t.element_size()) * rng.randint(1, 4)
    buf = torch.empty((*t.shape[:-1], t.shape[-1] + pad), dtype=t.dtype, device=t.device)
    buf[..., :t.shape[-1]] = t
    return buf[..., :t.shape[-1]]


class GuardedOut:
    """An output tensor inside a NaN-filled buffer, with guard elements around it that no kernel may touch."""

    def __init__(self, shape, dtype, rng: random.Random, strided: bool):
        self.strided = strided
        if strided:  # a [.., rows, cols] view at row 1 of a buffer with two more rows and 16-byte-multiple more columns
            *lead, rows, cols = shape
            pad = (16 // torch.empty((), dtype=dtype).element_size()) * rng.randint(1, 3)
            self.buf = torch.full((*lead, rows + 2, cols + pad), float("nan"), dtype=dtype, device="cuda")
            self.out = self.buf[..., 1:rows + 1, :cols]
        else:  # contiguous, between guard blocks of 16 bytes x 1-3 before and after
            numel = 1
            for s in shape:
                numel *= s
            self.guard = (16 // torch.empty((), dtype=dtype).element_size()) * rng.randint(1, 3)
            self.buf = torch.full((numel + 2 * self.guard,), float("nan"), dtype=dtype, device="cuda")
            self.out = self.buf[self.guard:self.guard + numel].view(shape)

    def poison(self):
        self.buf.fill_(float("nan"))

    def check_guards(self, what: str):
        if self.strided:
            rows, cols = self.out.shape[-2:]
            guards = [self.buf[..., 0, :], self.buf[..., rows + 1, :], self.buf[..., 1:rows + 1, cols:]]
        else:
            guards = [self.buf[:self.guard], self.buf[-self.guard:]]
        for g in guards:
            assert g.isnan().all(), f"{what}: a store landed outside the output ({int((~g.isnan()).sum())} elements)"


def _accepted(call, what: str, names: tuple) -> bool:
    """Run an op on an unusual (but well-formed) layout: it must either run (the caller then checks the result) or
    refuse with a ValueError / TypeError whose message starts with one of the argument ``names`` - never a silent
    wrong answer."""
    try:
        call()
        _log(what, "ran")
        return True
    except (ValueError, TypeError) as exc:
        assert str(exc).split()[0] in names, f"{what}: refused without naming the argument first: {exc}"
        _log(what, f"refused: {exc}")
        return False


def _log(what: str, outcome: str) -> None:
    """One line per unusual-layout call to ``CUTE_KERNELS_FUZZ_LOG`` if set (which ones run, which are refused)."""
    path = os.environ.get("CUTE_KERNELS_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{what} | {outcome}\n")


def _close(out: torch.Tensor, ref: torch.Tensor, rel_max: float, what: str, rel_each: float = 0.0):
    """out against a float64 reference: no NaN; every error <= rel_each |ref| + rel_max max|ref|."""
    assert not out.isnan().any(), f"{what}: {int(out.isnan().sum())} elements unwritten (NaN poison survived)"
    ref = ref.double().to(out.device)
    err = (out.double() - ref).abs()
    bound = rel_each * ref.abs() + rel_max * (ref.abs().max().item() or 1.0)
    bad = err > bound
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} elements off, worst error "
                           f"{err.max().item():.3e} (max|ref| {ref.abs().max().item():.3e}), first at "
                           f"{tuple(bad.nonzero()[0].tolist())}")


# --- int8_scaled_mm -----------------------------------------------------------------------------------------------

def _int8_case(case: int):
    rng = _rng("int8", case)
    m, n, k = _tokens(rng), 8 * rng.randint(1, 520), 16 * rng.randint(1, 260)
    batch = rng.choice([None, None, None, None, 2, 3])
    out_dtype = rng.choice([torch.bfloat16, torch.float16, torch.float32])
    a_kind, b_kind = rng.choice(["vector", "scalar"]), rng.choice(["vector", "scalar"])
    bias_kind = rng.choice([None, "out", "int32"])
    pad_a, pad_b, strided = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.7
    # batched: one weight broadcast over the batch (stride 0), or a's batch interleaved with its rows
    batch_layout = rng.choice(["dense", "dense", "broadcast b", "interleaved a"]) if batch else "dense"
    what = (f"int8 case {case}: M={m} N={n} K={k} batch={batch} ({batch_layout}) out={out_dtype} "
            f"scales={a_kind}/{b_kind} bias={bias_kind} padded a/b={pad_a}/{pad_b} strided out={strided}")
    return rng, dict(m=m, n=n, k=k, batch=batch, out_dtype=out_dtype, a_kind=a_kind, b_kind=b_kind,
                     bias_kind=bias_kind, pad_a=pad_a, pad_b=pad_b, strided=strided, batch_layout=batch_layout), what


@pytest.mark.parametrize("case", range(CASES))
def test_int8_scaled_mm_fuzz(case):
    rng, p, what = _int8_case(case)
    lead = () if p["batch"] is None else (p["batch"],)
    out = GuardedOut((*lead, p["m"], p["n"]), p["out_dtype"], rng, p["strided"])
    broadcast = p["batch_layout"] == "broadcast b"
    w = torch.randint(-128, 128, (*(() if broadcast else lead), p["n"], p["k"]), dtype=torch.int8, device="cuda")
    if p["pad_b"]:
        w = _row_padded(w, rng)
    b = (w.expand(*lead, *w.shape) if broadcast else w).transpose(-1, -2)
    b_scale = torch.rand(p["n"] if p["b_kind"] == "vector" else 1, device="cuda") * 0.02 + 0.001
    bias = {None: None, "int32": torch.randint(-4000, 4000, (p["n"],), dtype=torch.int32, device="cuda"),
            "out": (torch.randn(p["n"], device="cuda") * 4).to(p["out_dtype"])}[p["bias_kind"]]
    for call in range(2):
        if p["batch_layout"] == "interleaved a":  # [M, L, K] storage seen as [L, M, K]
            a = torch.randint(-128, 128, (p["m"], *lead, p["k"]), dtype=torch.int8, device="cuda").transpose(0, 1)
        else:
            a = torch.randint(-128, 128, (*lead, p["m"], p["k"]), dtype=torch.int8, device="cuda")
        if p["pad_a"]:
            a = _row_padded(a, rng)
        a_scale = torch.rand(p["m"] if p["a_kind"] == "vector" else 1, device="cuda") * 0.02 + 0.001
        out.poison()
        if not _accepted(lambda: int8_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype=p["out_dtype"], out=out.out),
                         what, ("a", "b", "out")):
            assert p["batch_layout"] != "dense", f"{what}: a dense layout refused"
            return
        torch.cuda.synchronize()
        out.check_guards(f"{what} call {call}")
        ref = int8_scaled_mm_ref(a, b, a_scale, b_scale, bias)
        # as test_int8_scaled_mm_gpu: fp32 epilogue arithmetic and one rounding to the output type, per element
        tol = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10, torch.float32: 1e-6}[p["out_dtype"]]
        _close(out.out, ref, 1e-6, f"{what} call {call}", rel_each=tol)


# --- fp8_blockwise_scaled_mm --------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", range(CASES))
def test_fp8_blockwise_scaled_mm_fuzz(case):
    rng = _rng("fp8", case)
    m, n, k = _tokens(rng), 8 * rng.randint(1, 520), 128 * rng.randint(1, 24)
    batch = rng.choice([None, None, None, 2])
    gran = rng.choice([(1, 128, 128), (128, 128, 128)])
    a_dtype, b_dtype = rng.choice([F8[0], F8[0], F8[1]]), rng.choice([F8[0], F8[0], F8[1]])
    out_dtype = rng.choice([torch.bfloat16, torch.float16])
    a_layout = rng.choice(["k-major", "mn-major", "tma-aligned"] if gran[0] == 1 else ["k-major", "mn-major"])
    b_layout = rng.choice(["k-major", "mn-major"])
    pad_a, pad_b, strided = rng.random() < 0.4, rng.random() < 0.4, rng.random() < 0.7
    broadcast = batch is not None and rng.random() < 0.3  # one weight (and its scales) broadcast over the batch
    what = (f"fp8 case {case}: M={m} N={n} K={k} batch={batch} gran={gran} {a_dtype}/{b_dtype} out={out_dtype} "
            f"a_scale {a_layout} b_scale {b_layout} padded a/b={pad_a}/{pad_b} strided out={strided} "
            f"broadcast b={broadcast}")
    lead = () if batch is None else (batch,)
    out = GuardedOut((*lead, m, n), out_dtype, rng, strided)
    w_lead = () if broadcast else lead
    w = torch.randn((*w_lead, n, k), device="cuda") * torch.exp2(torch.randint(-4, 3, (*w_lead, n, 1), device="cuda"))
    b, b_s = quantize_fp8_blockwise(w, 128, dtype=b_dtype)
    if pad_b:
        b = _row_padded(b, rng)
    layouts = {"k-major": lambda s: s.contiguous(), "mn-major": to_mn_major, "tma-aligned": to_tma_aligned_mn_major}
    b_s = layouts[b_layout](b_s)
    if broadcast:
        b, b_s = b.expand(*lead, *b.shape), b_s.expand(*lead, *b_s.shape)
    for call in range(2):
        x = torch.randn((*lead, m, k), device="cuda") * 3
        a, a_s = (quantize_fp8_per_token_group(x, 128, dtype=a_dtype) if gran[0] == 1
                  else quantize_fp8_blockwise(x, 128, dtype=a_dtype))
        if pad_a:
            a = _row_padded(a, rng)
        a_s = layouts[a_layout](a_s)
        out.poison()
        if not _accepted(lambda: fp8_blockwise_scaled_mm(a, b, a_s, b_s, out_dtype=out_dtype, scale_granularity=gran,
                                                         out=out.out), what, ("b", "b_scale")):
            assert broadcast, f"{what}: a dense layout refused"
            return
        torch.cuda.synchronize()
        out.check_guards(f"{what} call {call}")
        ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, gran)
        # fp32 promotion of exact FP8 products; the rest is the output rounding and fp32 summation order
        _close(out.out, ref, 1e-2, f"{what} call {call}")


# --- quantized_mm -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", range(CASES))
def test_quantized_mm_fuzz(case):
    rng = _rng("quantized_mm", case)
    bits = rng.choice([1, 2, 4, 8])
    m, n = _tokens(rng), rng.randint(1, 3000)
    group = rng.choice([None, None, 32, 64, 128])
    k = (group or 128) * rng.randint(1, 40)
    x_dtype = rng.choice([torch.bfloat16, torch.float16, torch.float16, torch.float32])
    out_dtype = rng.choice([None, None, torch.float32])
    x_layout = rng.choice(["dense", "dense", "padded", "column-major"])
    what = (f"quantized_mm case {case}: bits={bits} M={m} N={n} K={k} group={group} x={x_dtype} out_dtype={out_dtype}"
            f" x {x_layout}")
    w_packed, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
    od = out_dtype or x_dtype
    out = GuardedOut((m, n), od, rng, strided=False)
    for call in range(2):
        x = torch.randn(m, k, dtype=x_dtype, device="cuda")
        if x_layout == "padded":
            x = _row_padded(x, rng)
        elif x_layout == "column-major":
            x = x.t().contiguous().t()
        out.poison()
        res = []
        if not _accepted(lambda: res.append(quantized_mm(x, w_packed, scale, bits, gs, out_dtype, out=out.out)),
                         what, ("x",)):
            assert x_layout == "column-major", f"{what}: a row-major x refused"
            return
        assert res[0].data_ptr() == out.out.data_ptr()
        torch.cuda.synchronize()
        out.check_guards(f"{what} call {call}")
        ref = quantized_mm_ref(x, w_packed, scale, bits, gs)
        # as test_weight_only_gpu: the input dtype's rounding (folded group scales for fp32 x: bf16's)
        tol = {torch.bfloat16: 8e-3, torch.float16: 1.5e-3, torch.float32: 8e-3 if gs is not None else 2e-5}[x_dtype]
        _close(out.out, ref, tol, f"{what} call {call}")


# --- awq_gemm / awq_linear ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", range(CASES))
def test_awq_fuzz(case):
    rng = _rng("awq", case)
    group = rng.choice([32, 64, 128, 128, -1])
    ic = (128 if group == -1 else group) * rng.randint(1, 40)
    oc = 8 * rng.randint(1, 600)
    dtype = rng.choice([torch.float16, torch.float16, torch.bfloat16])
    lead = rng.choice([(), (), (2,), (3, 2)])
    m = _tokens(rng)
    linear = rng.random() < 0.4
    with_bias = linear and rng.random() < 0.5
    column_major_x = not linear and rng.random() < 0.25
    scale_amp = rng.choice([1.0, 0.05])  # N(0, 1) weights give max|s| ~ 0.5 (one-fma e > 0); x 0.05: e = 0
    what = (f"awq case {case}: M={m} lead={lead} IC={ic} OC={oc} G={group} {dtype} "
            f"{'awq_linear' if linear else 'awq_gemm'} bias={with_bias} scale x{scale_amp} column-major x={column_major_x}")
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda"), ic if group == -1 else group,
                                           scale_dtype=dtype)
    scales = (scales * scale_amp).contiguous()
    bias = (torch.randn(oc, device="cuda") * 0.5).to(dtype) if with_bias else None
    out = GuardedOut((m, oc), dtype, rng, strided=False)
    for call in range(2):
        if linear:
            x = torch.randn((*lead, m, ic), dtype=dtype, device="cuda")
            res = awq_linear(x, qweight, scales, qzeros, bias)
            assert res.shape == (*lead, m, oc)
            x, res = x.reshape(-1, ic), res.reshape(-1, oc)
        else:
            x = torch.randn(m, ic, dtype=dtype, device="cuda")
            if column_major_x:
                x = x.t().contiguous().t()
            out.poison()
            got = []
            if not _accepted(lambda: got.append(awq_gemm(x, qweight, scales, qzeros, out=out.out)), what, ("x",)):
                assert column_major_x, f"{what}: a row-major x refused"
                return
            res = got[0]
            assert res.data_ptr() == out.out.data_ptr()
            torch.cuda.synchronize()
            out.check_guards(f"{what} call {call}")
        ref = awq_gemm_ref(x, qweight, scales, qzeros)
        if bias is not None:
            ref = ref + bias.double()
        # as test_awq_gpu: the dequantized weight rounded once (twice for the one-fma decode) to x's dtype
        _close(res, ref, {torch.float16: 2e-3, torch.bfloat16: 1e-2}[dtype], f"{what} call {call}")
