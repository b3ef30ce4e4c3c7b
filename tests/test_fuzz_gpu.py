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

from cute_kernels import fp8_blockwise_scaled_mm, fp8_scaled_mm, int8_scaled_mm
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major
from cute_kernels.reference import (awq_gemm_ref, fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref,
                                    quantized_mm_ref)
from cute_kernels.weight_only import awq_gemm, awq_linear, quantized_mm
from tests.conftest import int8_gemm_inputs

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


def _at_offset(shape, dtype, elements: int, fill=float("nan"), tail: int = 16):
    """(view, buffer): a contiguous tensor of ``shape`` that starts ``elements`` elements into a ``fill``-ed buffer
    with ``tail`` elements after it (an offset that is not a multiple of 16 bytes gives a misaligned base)."""
    numel = 1
    for s in shape:
        numel *= s
    buf = torch.full((numel + elements + tail,), fill, dtype=dtype, device="cuda")
    return buf[elements:elements + numel].view(shape), buf


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
            self.guard = (16 // torch.empty((), dtype=dtype).element_size()) * rng.randint(1, 3)
            self.out, self.buf = _at_offset(shape, dtype, self.guard, tail=self.guard)

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

@pytest.mark.parametrize("case", range(CASES))
def test_int8_scaled_mm_fuzz(case):
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
    lead = () if batch is None else (batch,)
    out = GuardedOut((*lead, m, n), out_dtype, rng, strided)
    broadcast = batch_layout == "broadcast b"
    w = torch.randint(-128, 128, (*(() if broadcast else lead), n, k), dtype=torch.int8, device="cuda")
    if pad_b:
        w = _row_padded(w, rng)
    b = (w.expand(*lead, *w.shape) if broadcast else w).transpose(-1, -2)
    b_scale = torch.rand(n if b_kind == "vector" else 1, device="cuda") * 0.02 + 0.001
    bias = {None: None, "int32": torch.randint(-4000, 4000, (n,), dtype=torch.int32, device="cuda"),
            "out": (torch.randn(n, device="cuda") * 4).to(out_dtype)}[bias_kind]
    for call in range(2):
        if batch_layout == "interleaved a":  # [M, L, K] storage seen as [L, M, K]
            a = torch.randint(-128, 128, (m, *lead, k), dtype=torch.int8, device="cuda").transpose(0, 1)
        else:
            a = torch.randint(-128, 128, (*lead, m, k), dtype=torch.int8, device="cuda")
        if pad_a:
            a = _row_padded(a, rng)
        a_scale = torch.rand(m if a_kind == "vector" else 1, device="cuda") * 0.02 + 0.001
        out.poison()
        if not _accepted(lambda: int8_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype=out_dtype, out=out.out),
                         what, ("a", "b", "out")):
            assert batch_layout != "dense", f"{what}: a dense layout refused"
            return
        torch.cuda.synchronize()
        out.check_guards(f"{what} call {call}")
        ref = int8_scaled_mm_ref(a, b, a_scale, b_scale, bias)
        # as test_int8_scaled_mm_gpu: fp32 epilogue arithmetic and one rounding to the output type, per element
        tol = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10, torch.float32: 1e-6}[out_dtype]
        _close(out.out, ref, 1e-6, f"{what} call {call}", rel_each=tol)


@pytest.mark.parametrize("case", range(CASES))
def test_scaled_mm_zero_points_and_fp8_fuzz(case):
    """Session 37's variants of the same kernel: int8 with zero points (per token / per tensor, with any bias kind,
    either arch) and FP8 operands (fp8_scaled_mm, e4m3 / e5m2 pairings), random shapes, batch, padded rows, guarded
    outputs, warm second calls."""
    rng = _rng("scaled_mm_37", case)
    fp8 = rng.random() < 0.5
    m, n, k = _tokens(rng), 8 * rng.randint(1, 520), 16 * rng.randint(1, 260)
    batch = rng.choice([None, None, None, 2, 3])
    out_dtype = rng.choice([torch.bfloat16, torch.float16, torch.float32])
    a_kind, b_kind = rng.choice(["vector", "scalar"]), rng.choice(["vector", "scalar"])
    bias_kind = rng.choice([None, "out"] if fp8 else [None, "out", "int32"])
    zero_point = None if fp8 else rng.choice(["token", "tensor"])
    arch = "sm90" if fp8 or out_dtype == torch.float32 else rng.choice(["sm90", "sm80"])
    dtypes = (rng.choice(F8), rng.choice(F8)) if fp8 else (torch.int8, torch.int8)
    pad_a, pad_b, strided = rng.random() < 0.5, rng.random() < 0.5, rng.random() < 0.7
    what = (f"scaled_mm case {case}: {'fp8 ' + str(dtypes) if fp8 else 'int8 zero point ' + zero_point} M={m} N={n} "
            f"K={k} batch={batch} out={out_dtype} scales={a_kind}/{b_kind} bias={bias_kind} arch={arch} "
            f"padded a/b={pad_a}/{pad_b} strided out={strided}")
    lead = () if batch is None else (batch,)
    out = GuardedOut((*lead, m, n), out_dtype, rng, strided)

    def codes(shape, dtype):
        if dtype == torch.int8:
            return torch.randint(-128, 128, shape, dtype=torch.int8, device="cuda")
        return (torch.randn(shape, device="cuda") * 2).to(dtype)

    w = codes((n, k), dtypes[1])  # one weight broadcast over the batch: the zero-point sums are per column of it
    if pad_b:
        w = _row_padded(w, rng)
    b = w.expand(*lead, n, k).transpose(-1, -2)
    b_scale = torch.rand(n if b_kind == "vector" else 1, device="cuda") * 0.02 + 0.001
    bias = {None: None, "int32": torch.randint(-4000, 4000, (n,), dtype=torch.int32, device="cuda"),
            "out": (torch.randn(n, device="cuda") * 4).to(out_dtype)}[bias_kind]
    for call in range(2):
        a = codes((*lead, m, k), dtypes[0])
        if pad_a:
            a = _row_padded(a, rng)
        a_scale = torch.rand(m if a_kind == "vector" else 1, device="cuda") * 0.02 + 0.001
        out.poison()
        if fp8:
            fp8_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype=out_dtype, out=out.out)
            azp_adj = azp = None
        else:
            sums = w.to(torch.int32).sum(1, dtype=torch.int32)
            azp = torch.randint(-128, 128, (m,), dtype=torch.int32, device="cuda")
            azp_adj, azp = (sums, azp) if zero_point == "token" else (sums * int(azp[0]), None)
            int8_scaled_mm(a, b, a_scale, b_scale, bias, out_dtype=out_dtype, out=out.out, arch=arch,
                           azp_adj=azp_adj, azp=azp)
        torch.cuda.synchronize()
        out.check_guards(f"{what} call {call}")
        ref = int8_scaled_mm_ref(a, b, a_scale, b_scale, bias, azp_adj=azp_adj, azp=azp)
        tol = {torch.bfloat16: 2 ** -7, torch.float16: 2 ** -10, torch.float32: 1e-6}[out_dtype]
        if fp8:  # the unpromoted FP8 accumulation (docs/int8_scaled_mm.md, fp8_scaled_mm): grows with K
            _close(out.out, ref, 2e-2 * max(1.0, k / 4096), f"{what} call {call}", rel_each=3e-2)
        else:
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
    # grouped: whole groups; ungrouped: any K the packing allows (whole bytes per row), ragged K-tiles included
    k = group * rng.randint(1, 40) if group else (8 // bits) * rng.randint(1, 5000 * bits // 8)
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
    ic = rng.randint(1, 5000) if group == -1 else group * rng.randint(1, 40)  # one group: any IC
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


# --- warm calls with another layout -------------------------------------------------------------------------------
# int8_scaled_mm and fp8_blockwise_scaled_mm remember a validated plan per shape signature (shapes and dtypes, not
# strides) and on a warm call rely on the compiled function's own argument checks. A later call with the same shapes
# but another layout must then still run correctly or be refused with the argument named - never reuse a plan that
# reads the new layout wrongly.

def _int8_layout_variants(m, n, k):
    a, b, a_s, b_s, _ = int8_gemm_inputs(m, n, k, bias=False, seed=m + n + k)
    w = b.t()
    storage = torch.empty(m * k + 16, dtype=torch.int8, device="cuda")
    misaligned = storage[1:1 + m * k].view(m, k)
    misaligned.copy_(a)
    return [  # (label, a, b, a_scale, b_scale, must run)
        ("dense", a, w.t(), a_s, b_s, True),
        ("a with padded rows", _row_padded(a, random.Random(1)), w.t(), a_s, b_s, True),
        ("b padded", a, _row_padded(w, random.Random(2)).t(), a_s, b_s, True),
        ("b row-major [K, N]", a, w.t().contiguous(), a_s, b_s, False),
        ("a_scale with stride 2", a, w.t(), torch.rand(2 * m, device="cuda")[::2], b_s, False),
        ("b_scale broadcast (stride 0)", a, w.t(), a_s, b_s[:1].expand(n), False),
        ("a at a 1-byte offset", misaligned, w.t(), a_s, b_s, False),
    ]


@pytest.mark.parametrize("arch", ["sm90", "sm80"])
@pytest.mark.parametrize("m,n,k", [(5, 264, 256), (200, 1032, 512)])
def test_int8_warm_calls_with_other_layouts(arch, m, n, k):
    if arch == "sm90" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("SM90 kernel")
    variants = _int8_layout_variants(m, n, k)
    for order in (variants, variants[::-1]):  # each layout both as the first (planning) call and as a warm one
        for label, a, b, a_s, b_s, must_run in order:
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            what = f"int8 {arch} M={m} N={n} K={k}, {label}"
            ran = _accepted(lambda: int8_scaled_mm(a, b, a_s, b_s, None, out=out, arch=arch), what,
                            ("a", "b", "a_scale", "b_scale"))
            assert ran or not must_run, f"{what}: refused"
            if ran:
                torch.cuda.synchronize()
                tol = 2 ** -7
                _close(out, int8_scaled_mm_ref(a, b, a_s, b_s), 1e-6, what, rel_each=tol)


@pytest.mark.parametrize("m,n,k", [(128, 1024, 512), (8, 1024, 512), (100, 576, 384)])
def test_fp8_warm_calls_with_other_scale_layouts(m, n, k):
    """Same shapes, a_scale / b_scale / b in other layouts call after call (the TMA-staged a_scale kernel is compiled
    for a 16-byte-aligned MN-major a_scale; a K-major one of the same shape must not reuse it blindly)."""
    x = torch.randn(m, k, device="cuda") * 3
    a, a_s = quantize_fp8_per_token_group(x, 128)
    b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda"), 128)
    sfa = {"k-major": a_s.contiguous(), "mn-major": to_mn_major(a_s), "tma-aligned": to_tma_aligned_mn_major(a_s)}
    sfb = {"k-major": b_s.contiguous(), "mn-major": to_mn_major(b_s)}
    bs = {"dense": b, "padded": _row_padded(b, random.Random(3))}
    combos = [(la, lb, lw) for la in sfa for lb in sfb for lw in bs]
    for order in (combos, combos[::-1]):
        for la, lb, lw in order:
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            fp8_blockwise_scaled_mm(a, bs[lw], sfa[la], sfb[lb], out=out)
            torch.cuda.synchronize()
            _close(out, fp8_blockwise_scaled_mm_ref(a, bs[lw], sfa[la], sfb[lb], (1, 128, 128)), 1e-2,
                   f"fp8 M={m} N={n} K={k}: a_scale {la}, b_scale {lb}, b {lw}")


@pytest.mark.parametrize("m", [1, 16, 40, 300])
@pytest.mark.parametrize("op", ["quantized_mm int4 g128", "quantized_mm int2", "awq_gemm"])
def test_weight_only_views_off_16_bytes(op, m):
    """x and out that start 2 bytes past a 16-byte boundary (a slice of a larger activation / output buffer), on each
    path (decode, WGMMA, dense by token count): they run correctly or are refused with the argument named; the bytes
    around out stay untouched."""
    n, k = 1032, 1024
    if op == "awq_gemm":
        qweight, qzeros, scales = awq_quantize(torch.randn(k, n, device="cuda"), 128)
        run = lambda x, out: awq_gemm(x, qweight, scales, qzeros, out=out)  # noqa: E731
        ref = lambda x: awq_gemm_ref(x, qweight, scales, qzeros)  # noqa: E731
        tol = 2e-3
    else:
        bits, group = (4, 128) if "int4" in op else (2, None)
        w_packed, scale, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, group)
        run = lambda x, out: quantized_mm(x, w_packed, scale, bits, gs, out=out)  # noqa: E731
        ref = lambda x: quantized_mm_ref(x, w_packed, scale, bits, gs)  # noqa: E731
        tol = 1.5e-3
    for x_off, out_off in ((1, 0), (0, 1), (1, 1), (0, 0)):
        for call in range(2):  # the second call of a layout takes the warm path
            x, _ = _at_offset((m, k), torch.float16, x_off, fill=0.0)
            x.copy_(torch.randn(m, k, device="cuda"))
            out, buf = _at_offset((m, n), torch.float16, out_off)
            what = f"{op} M={m}: x offset {2 * x_off} B, out offset {2 * out_off} B, call {call}"
            if not _accepted(lambda: run(x, out), what, ("x", "out")):
                assert x_off or out_off, f"{what}: aligned tensors refused"
                continue
            torch.cuda.synchronize()
            _close(out, ref(x), tol, what)
            assert buf[:out_off].isnan().all() and buf[out_off + m * n:].isnan().all(), f"{what}: stored outside out"


# --- int8_scaled_mm's other arguments -----------------------------------------------------------------------------

@pytest.mark.parametrize("m,n,k", [(3, 1032, 512), (700, 1040, 384)])
@pytest.mark.parametrize("c_layout", ["dense fp32", "dense bf16", "padded fp16", "broadcast row fp32"])
def test_int8_added_operand_layouts(m, n, k, c_layout):
    """``c`` (added before the final rounding) as a dense tensor of each dtype, a view with padded rows, and one row
    broadcast over M (row stride 0): it runs correctly or is refused with ``c`` named."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("c is an SM90-kernel operand")
    a, b, a_s, b_s, _ = int8_gemm_inputs(m, n, k, bias=False, seed=m + n)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[c_layout.split()[-1]]
    c = torch.randn(m, n, device="cuda").to(dtype) * 100
    if c_layout.startswith("padded"):
        c = _row_padded(c, random.Random(4))
    elif c_layout.startswith("broadcast"):
        c = c[:1].expand(m, n)
    for call in range(2):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        what = f"int8 M={m} N={n} K={k} c {c_layout} call {call}"
        if _accepted(lambda: int8_scaled_mm(a, b, a_s, b_s, out=out, c=c), what, ("c",)):
            torch.cuda.synchronize()
            _close(out, int8_scaled_mm_ref(a, b, a_s, b_s) + c.double(), 1e-6, what, rel_each=2 ** -7)
        else:
            assert c_layout.startswith("broadcast"), f"{what}: refused"


@pytest.mark.parametrize("sm_count", [1, 2, 3, 7, 66, 131])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 2048), (64, 4096, 1024), (2048, 2048, 512)])
def test_int8_fewer_sms(sm_count, m, n, k):
    """``sm_count`` leaves SMs to other work: the persistent grid, its clusters and its split-K plans on 1-131 SMs
    (odd counts too, where a 2-CTA cluster cannot use every SM) stay correct."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("sm_count is an SM90-kernel argument")
    a, b, a_s, b_s, _ = int8_gemm_inputs(m, n, k, bias=False, seed=sm_count)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    int8_scaled_mm(a, b, a_s, b_s, out=out, sm_count=sm_count)
    torch.cuda.synchronize()
    _close(out, int8_scaled_mm_ref(a, b, a_s, b_s), 1e-6, f"int8 M={m} N={n} K={k} on {sm_count} SMs",
           rel_each=2 ** -7)


@pytest.mark.parametrize("shape", [(0, 264, 256), (5, 0, 256), (0, 0, 256), ("batch 0", 5, 264, 256)])
def test_empty_problems(shape):
    """Empty M, N or batch: an empty result of the right shape (or a refusal naming the extent), never a launch
    failure; int8 and FP8 return it."""
    lead = ()
    if shape[0] == "batch 0":
        lead, shape = (0,), shape[1:]
    m, n, k = shape
    a, b, a_scale, _, _ = int8_gemm_inputs(m, n, k, batch=lead[0] if lead else None,
                                            a_kind="vector" if m else "scalar", bias=False)
    res = [int8_scaled_mm(a, b, a_scale, torch.ones(1, device="cuda"))]
    assert res[0].shape == (*lead, m, n), f"int8 empty {lead} {shape}"
    af = torch.randn(*lead, m, k, device="cuda").to(torch.float8_e4m3fn)
    bf = torch.randn(*lead, n, k, device="cuda").to(torch.float8_e4m3fn)
    sfa, sfb = torch.rand(*lead, m, k // 128, device="cuda"), torch.rand(*lead, -(-n // 128), k // 128, device="cuda")
    for call in range(2):  # the second one through the warm path
        out = fp8_blockwise_scaled_mm(af, bf, sfa, sfb)  # FP8 runs them (MoE experts with no tokens)
        assert out.shape == (*lead, m, n) and out.dtype == torch.bfloat16, f"fp8 empty {lead} {shape} call {call}"
    x = torch.randn(m, 512, dtype=torch.float16, device="cuda")
    w_packed, scale, _ = quantize_weights(torch.randn(max(n, 1), 512, device="cuda"), 4)
    w_packed = w_packed[:n]
    if _accepted(lambda: res.append(quantized_mm(x, w_packed, scale, 4)), f"quantized_mm empty {shape}",
                 ("x", "w_packed", "N", "M")):
        torch.cuda.synchronize()
        assert res[-1].shape == (m, n)


@pytest.mark.parametrize("m,x_dtype", [(1, torch.float16), (16, torch.float16), (300, torch.bfloat16),
                                       (8, torch.float32)])
def test_weights_off_16_bytes(m, x_dtype):
    """Packed weights whose base is not 16-byte aligned - a row slice of a larger packed matrix with 100-byte rows
    (4-bit, K = 200), an AWQ qweight / qzeros 4 bytes into their storage - on every path by token count and x dtype:
    correct, or refused with the argument named."""
    from cute_kernels.weight_only import awq_dequantize

    n, k = 264, 200
    w_packed, scale, _ = quantize_weights(torch.randn(n + 1, k, device="cuda"), 4)
    w = w_packed[1:]  # 100 bytes into the storage
    assert w.data_ptr() % 16
    x = torch.randn(m, k, device="cuda").to(x_dtype)
    out = []
    what = f"quantized_mm 4-bit M={m} x {x_dtype}: w_packed 100 bytes off"
    if _accepted(lambda: out.append(quantized_mm(x, w, scale, 4)), what, ("w_packed",)):
        torch.cuda.synchronize()
        _close(out[0], quantized_mm_ref(x, w, scale, 4), 8e-3, what)
    if x_dtype == torch.float32:
        return
    ic, oc = 256, 40
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc, device="cuda"), 128, scale_dtype=x_dtype)
    q_off, _ = _at_offset(qweight.shape, torch.int32, 1, fill=0)
    z_off, _ = _at_offset(qzeros.shape, torch.int32, 1, fill=0)
    q_off.copy_(qweight)
    z_off.copy_(qzeros)
    xa = torch.randn(m, ic, device="cuda").to(x_dtype)
    what = f"awq M={m} {x_dtype}: qweight / qzeros 4 bytes off"
    got = []
    if _accepted(lambda: got.append(awq_gemm(xa, q_off, scales, z_off)), what, ("qweight", "qzeros")):
        torch.cuda.synchronize()
        _close(got[0], awq_gemm_ref(xa, qweight, scales, qzeros), 1e-2, what)
    if _accepted(lambda: got.append(awq_dequantize(q_off, scales, z_off)), what + " (dequantize)",
                 ("qweight", "qzeros")):
        torch.cuda.synchronize()
        assert torch.equal(got[-1], awq_dequantize(qweight, scales, qzeros)), what + " (dequantize)"


@pytest.mark.parametrize("m,n,k", [(128, 1024, 512), (8, 1024, 512), (100, 576, 384), (1024, 2048, 1024)])
def test_fp8_broadcast_scales(m, n, k):
    """Scale tensors with stride-0 dimensions - one scale per token reused for every K block (strides (1, 0)), one per
    K block shared by all tokens ((0, 1)), a single weight scale ((0, 0)) - e.g. a per-token recipe fed to the
    groupwise kernel through ``expand``: correct (the TMA-staged a_scale too), or refused with the scale named."""
    kb = k // 128
    a = (torch.randn(m, k, device="cuda") * 3).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    per_token = torch.rand(m, 1, device="cuda") + 0.5
    per_block = torch.rand(1, kb, device="cuda") + 0.5
    variants = {
        "a_scale per token (1, 0)": (per_token.expand(m, kb), torch.rand(-(-n // 128), kb, device="cuda") + 0.5),
        "a_scale per K block (0, 1)": (per_block.expand(m, kb), torch.rand(-(-n // 128), kb, device="cuda") + 0.5),
        "b_scale one value (0, 0)": (to_mn_major(torch.rand(m, kb, device="cuda") + 0.5),
                                     torch.rand(1, 1, device="cuda").expand(-(-n // 128), kb)),
    }
    for label, (sa, sb) in list(variants.items()) * 2:  # twice: the warm path too
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        what = f"fp8 M={m} N={n} K={k}: {label}, strides {sa.stride()} / {sb.stride()}"
        if _accepted(lambda: fp8_blockwise_scaled_mm(a, b, sa, sb, out=out), what, ("a_scale", "b_scale")):
            torch.cuda.synchronize()
            _close(out, fp8_blockwise_scaled_mm_ref(a, b, sa, sb, (1, 128, 128)), 1e-2, what)


# --- weights rewritten in place -----------------------------------------------------------------------------------

@pytest.mark.parametrize("m", [1, 16])  # decode path, WGMMA path (both keep a layout derived from the weight)
def test_weights_rewritten_in_place(m):
    """An in-place update of a weight (``copy_``: the version counter moves) rebuilds the cached layouts by itself; a
    write the counter does not see (``.data.copy_``, as weight loaders do) is picked up after
    ``clear_weight_caches()``. AWQ (repack + blob + parameter words) and int4 g128 (blob + parameter words)."""
    from cute_kernels import clear_weight_caches

    ic, oc = 1024, 1032
    q1, z1, s1 = awq_quantize(torch.randn(ic, oc, device="cuda"), 128)
    q2, z2, s2 = awq_quantize(torch.randn(ic, oc, device="cuda"), 128)
    w1, _, g1 = quantize_weights(torch.randn(oc, ic, device="cuda"), 4, 128)
    w2, _, g2 = quantize_weights(torch.randn(oc, ic, device="cuda"), 4, 128)
    x = torch.randn(m, ic, dtype=torch.float16, device="cuda")
    qweight, qzeros, scales, w, gs = q1.clone(), z1.clone(), s1.clone(), w1.clone(), g1.clone()

    def check(what, awq_ref, wo_ref):
        _close(awq_gemm(x, qweight, scales, qzeros), awq_gemm_ref(x, *awq_ref), 2e-3, f"awq M={m}: {what}")
        _close(quantized_mm(x, w, 1.0, 4, gs), quantized_mm_ref(x, *wo_ref), 2e-3, f"int4 g128 M={m}: {what}")

    check("first weights", (q1, s1, z1), (w1, 1.0, 4, g1))
    for t, new in ((qweight, q2), (qzeros, z2), (scales, s2), (w, w2), (gs, g2)):
        t.copy_(new)
    check("after copy_", (q2, s2, z2), (w2, 1.0, 4, g2))
    for t, new in ((qweight, q1), (qzeros, z1), (scales, s1), (w, w1), (gs, g1)):
        version = t._version
        t.data.copy_(new)
        assert t._version == version  # what makes this case different: no version change
    clear_weight_caches()
    check("after .data.copy_ and clear_weight_caches()", (q1, s1, z1), (w1, 1.0, 4, g1))
