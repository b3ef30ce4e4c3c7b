"""Our int8 and FP8 kernels beside CUTLASS's own CuTe DSL Hopper GEMM examples at 8192^3, in one process (session 14).

Why: #2 and #3 set their large-GEMM targets from "a plain CuTe DSL Hopper GEMM (128x256 tile, 2x1 cluster, no
scaling): int8 1609 TOPS, fp8 1691 TFLOPS" measured once on an H200 (../shared/device/README.md), with no word on how
long the run was. Sessions 7-13 found that these GPUs hold their top clock only for short bursts (the 700 W cap pulls
it down under sustained tensor-core load). This script times the reference kernels and ours the same way, interleaved,
so the gap to the targets can be split into "what the hardware gives any DSL GEMM" and "what our kernel loses".

The reference kernels are CUTLASS's examples (examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/
dense_gemm_persistent.py and dense_gemm_fp8_2xacc.py - the latter is the 2xAcc FP8 GEMM with promotion every 128 K,
i.e. our blockwise kernel's two-level accumulation without the per-block scales). They are NOT part of this project:
copy them from a CUTLASS checkout into the folder named by $CUTLASS_DSL_EXAMPLES (default .device/ext, git-ignored).

Per variant: correctness on a small problem against float64 (the reference kernels have dynamic shapes, so the same
compiled function runs both sizes), then at 8192^3 two figures, each a median:
  burst     - 2 back-to-back calls after a 50 ms idle gap (12 repeats): the clock near its top;
  sustained - 300 back-to-back calls after 100 warm-up calls (3 repeats): the power-capped steady state;
with the SM clock and board power sampled (pynvml, 10 ms) during the sustained runs. Two interleaved rounds.

Operand data (DATA=full | small): "full" is what our benchmarks use (int8 uniform over [-128, 128), FP8 quantized
from Gaussians); "small" is the CUTLASS examples' own default (cutlass.torch.matrix: random integers in [-2, 2)),
which toggles far fewer bits in the tensor cores - under a power cap the data sets the clock, so this tells whether
the anchors were a property of the kernel or of its test data.
``DATA=full python benchmarks/experiments/plain_dsl_reference.py [name filter]`` prints JSON lines and a table;
writes $OUT/plain_dsl_reference_<DATA>.json.
"""
from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import threading
import time

import torch

EXT = os.environ.get("CUTLASS_DSL_EXAMPLES", ".device/ext")
M = N = K = 8192
DATA = os.environ.get("DATA", "full")
if DATA not in ("full", "small"):
    raise SystemExit(f"DATA must be 'full' or 'small'; got {DATA!r}")


def int8_data(*shape, small=False):
    lo, hi = (-2, 2) if small or DATA == "small" else (-128, 128)
    return torch.randint(lo, hi, shape, dtype=torch.int8, device="cuda")


def fp8_data(*shape):
    x = torch.randint(-2, 2, shape, device="cuda").float() if DATA == "small" else torch.randn(*shape, device="cuda")
    return x.to(torch.float8_e4m3fn)


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXT, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class ClockSampler:
    """SM clock (MHz) and power (W) sampled every 10 ms in a thread while active."""

    def __init__(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception:  # noqa: BLE001 - no NVML: report no clocks
            self.nvml = None
        self.samples = []

    def __enter__(self):
        self.samples, self.stop = [], False

        def loop():
            while not self.stop:
                n = self.nvml
                self.samples.append((n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM),
                                     n.nvmlDeviceGetPowerUsage(self.handle) / 1000))
                time.sleep(0.01)

        if self.nvml is not None:
            self.thread = threading.Thread(target=loop, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        if self.nvml is not None:
            self.thread.join()

    def summary(self):
        if not self.samples:
            return {}
        return {"sm_mhz": statistics.median(s[0] for s in self.samples),
                "power_w": statistics.median(s[1] for s in self.samples)}


def _events_us(call, n):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        call()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3 / n


def measure(call):
    burst = []
    for _ in range(12):
        torch.cuda.synchronize()
        time.sleep(0.05)
        burst.append(_events_us(call, 2))
    _events_us(call, 100)
    sampler = ClockSampler()
    with sampler:
        sustained = [_events_us(call, 300) for _ in range(3)]
    return {"burst_us": statistics.median(burst), "sustained_us": statistics.median(sustained), **sampler.summary()}


# ---- the reference kernels (CUTLASS examples), called through cute tensors made once --------------------------------

def _cute_mnl(t: torch.Tensor, dtype):
    """A [L, rows, cols] row-major torch tensor as the (rows, cols, L) cute tensor the examples take."""
    from cutlass.cute.runtime import from_dlpack

    raw = t.view(torch.uint8) if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else t
    ct = from_dlpack(raw.permute(1, 2, 0), assumed_align=16)
    ct.element_type = dtype
    return ct.mark_layout_dynamic(leading_dim=1)


def _stream():
    import cuda.bindings.driver as cuda

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


def plain_variant(family, cluster, swizzle, along_m):
    """CUTLASS's persistent dense GEMM, 128x256 tile, no scaling; int8 -> fp16 (int32 acc) or e4m3 -> fp16."""
    import cutlass
    from cutlass.utils import HardwareInfo

    mod = _load("dense_gemm_persistent")
    int8 = family == "int8"
    acc = cutlass.Int32 if int8 else cutlass.Float32
    ab = cutlass.Int8 if int8 else cutlass.Float8E4M3FN
    gemm = mod.HopperWgmmaGemmPersistentKernel(acc, (128, 256), cluster, swizzle, along_m)
    clusters = HardwareInfo().get_max_active_clusters(cluster[0] * cluster[1])

    def operands(m, n, k, small):
        if int8:  # the small check problem keeps its fp16 output exact
            a, b = int8_data(1, m, k, small=small), int8_data(1, n, k, small=small)
        else:
            a, b = fp8_data(1, m, k), fp8_data(1, n, k)
        d = torch.full((1, m, n), float("nan"), dtype=torch.float16, device="cuda")
        return a, b, d, (_cute_mnl(a, ab), _cute_mnl(b, ab), _cute_mnl(d, cutlass.Float16))

    a, b, d, ct = operands(256, 512, K, small=True)
    fn = cutlass.cute.compile(gemm, *ct, clusters, _stream())
    fn(*ct, _stream())
    ref = a[0].double() @ b[0].double().t()
    # int8: exact sums, fp16 rounding only. FP8 without promotion: WGMMA's reduced-precision accumulation is the
    # error (what the 2xAcc kernels fix), so only "not garbage" is asserted, relative to the largest |ref|.
    err = ((d[0].double() - ref).abs() / (ref.abs() + 1)).max().item() if int8 else \
        ((d[0].double() - ref).abs().max() / ref.abs().max()).item()
    assert not d.isnan().any() and err < (2e-3 if int8 else 0.1), err
    a, b, d, ct = operands(M, N, K, small=False)
    return err, lambda: fn(*ct, _stream())


def fp8_2xacc_variant(tile_n, cluster, swizzle, along_m):
    """CUTLASS's 2xAcc FP8 GEMM (promotion every 4 MMAs = 128 K), scalar scales, fp16 out."""
    import cutlass
    from cutlass.cute.runtime import from_dlpack
    from cutlass.utils import HardwareInfo

    mod = _load("dense_gemm_fp8_2xacc")
    gemm = mod.HopperFP8WarpSpecialized2xAccGemmKernel((128, tile_n), cluster, swizzle, along_m, 4)
    clusters = HardwareInfo().get_max_active_clusters(cluster[0] * cluster[1])
    sa = torch.tensor([0.5], device="cuda")
    sb = torch.tensor([0.25], device="cuda")
    csa, csb = from_dlpack(sa, assumed_align=4), from_dlpack(sb, assumed_align=4)

    def operands(m, n, k):
        a, b = fp8_data(1, m, k), fp8_data(1, n, k)
        d = torch.full((1, m, n), float("nan"), dtype=torch.float16, device="cuda")
        return a, b, d, (_cute_mnl(a, cutlass.Float8E4M3FN), _cute_mnl(b, cutlass.Float8E4M3FN),
                         _cute_mnl(d, cutlass.Float16))

    a, b, d, ct = operands(256, 512, K)
    fn = cutlass.cute.compile(gemm, *ct, csa, csb, clusters, _stream())
    fn(*ct, csa, csb, _stream())
    ref = (a[0].double() @ b[0].double().t()) * 0.125
    err = ((d[0].double() - ref).abs() / (ref.abs() + 1)).max().item()
    assert not d.isnan().any() and err < 1e-2, err
    a, b, d, ct = operands(M, N, K)
    return err, lambda: fn(*ct, csa, csb, _stream())


# ---- ours ------------------------------------------------------------------------------------------------------------

def ours_int8():
    from cute_kernels import int8_scaled_mm
    from cute_kernels.reference import int8_scaled_mm_ref

    a, b = int8_data(M, K), int8_data(N, K).t()
    sa, sb = torch.rand(M, device="cuda") * 0.01, torch.rand(N, device="cuda") * 0.01
    bias = torch.randn(N, device="cuda").bfloat16()
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    int8_scaled_mm(a, b, sa, sb, bias, out=out)
    rows = torch.arange(0, M, M // 64, device="cuda")
    ref = int8_scaled_mm_ref(a[rows], b, sa[rows], sb, bias)
    err = ((out[rows].double() - ref).abs() / (ref.abs() + 1)).max().item()
    assert not out.isnan().any() and err < 1e-2, err
    return err, lambda: int8_scaled_mm(a, b, sa, sb, bias, out=out)


def ours_fp8():
    sys.path.insert(0, "benchmarks")
    from bench_fp8_blockwise import GROUPWISE, operands, ours, rel_err
    from cute_kernels.reference import fp8_blockwise_scaled_mm_ref

    a, b, a_s, b_s = operands(M, N, K)
    if DATA == "small":  # the same scales; the codes replaced by the examples' small integers
        a, b = fp8_data(M, K), fp8_data(N, K)
    f = ours(a, b, a_s, b_s)
    out = f()
    rows = torch.arange(0, M, M // 64, device="cuda")
    err = rel_err(out[rows], fp8_blockwise_scaled_mm_ref(a[rows], b, a_s[rows], b_s, GROUPWISE))
    assert not out.isnan().any() and err < 1e-2, err
    return err, f


VARIANTS = {
    "int8 ours (scales+bias, bf16; 128x256 1x2 swizzle 4)": ours_int8,
    "int8 CUTLASS plain 128x256 2x1": lambda: plain_variant("int8", (2, 1), 1, True),
    "int8 CUTLASS plain 128x256 2x1 swizzle 4": lambda: plain_variant("int8", (2, 1), 4, False),
    "int8 CUTLASS plain 128x256 1x2 swizzle 4": lambda: plain_variant("int8", (1, 2), 4, True),
    "fp8 ours (groupwise 1x128/128x128, bf16)": ours_fp8,
    "fp8 CUTLASS plain 128x256 2x1": lambda: plain_variant("fp8", (2, 1), 1, True),
    "fp8 CUTLASS plain 128x256 2x1 swizzle 4": lambda: plain_variant("fp8", (2, 1), 4, False),
    "fp8 CUTLASS 2xAcc 128x128 2x1 swizzle 4": lambda: fp8_2xacc_variant(128, (2, 1), 4, False),
    "fp8 CUTLASS 2xAcc 128x256 2x1 swizzle 4": lambda: fp8_2xacc_variant(256, (2, 1), 4, False),
}


def main():
    only = sys.argv[1:]
    calls, rows = {}, []
    for name, make in VARIANTS.items():
        if only and not any(o in name for o in only):
            continue
        try:
            err, call = make()
            calls[name] = (err, call)
        except Exception as exc:  # noqa: BLE001 - a reference that does not build on this DSL is reported, not fatal
            print(json.dumps({"variant": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}), flush=True)
    flops = 2 * M * N * K
    for rnd in range(2):
        for name, (err, call) in calls.items():
            r = measure(call)
            row = {"variant": name, "data": DATA, "round": rnd, "rel_err": err, **r,
                   "burst_tops": flops / r["burst_us"] / 1e6, "sustained_tops": flops / r["sustained_us"] / 1e6,
                   "device": torch.cuda.get_device_name()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, f"plain_dsl_reference_{DATA}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(f"\ndata: {DATA}\n{'variant':56s} {'burst T':>8s} {'sust. T':>8s} {'MHz':>6s} {'W':>5s}")
    for r in rows:
        print(f"{r['variant']:56s} {r['burst_tops']:8.0f} {r['sustained_tops']:8.0f} {r.get('sm_mhz', 0):6.0f} "
              f"{r.get('power_w', 0):5.0f}")


if __name__ == "__main__":
    main()
