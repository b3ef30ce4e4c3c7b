"""Session 30: what sets the SM clock while the 8192^3 GEMMs of #2 and #3 run - ours and cuBLAS's, side by side.

For each kernel: 12 bursts of 2 calls (a host sync and 50 ms idle between bursts), then 5 replays of one CUDA graph
of back-to-back calls sized to ~0.3 s (sustained). nvidia-smi samples the SM clock, power draw and limit,
temperature and every clock-event reason every 50 ms in the background. Per kernel and phase the script reports
the median TOPS, the median clock and power of the samples that fall inside the phase (of those with the software
power cap active, where there are any), which clock-event reasons were active in them, and the work per clock as
a fraction of the dense tensor peak at the sampled clock (H100 / H200: 132 SMs x 8192 int8 or fp8 ops per clock per
SM, 4096 for bf16). Bursts (~1.5 ms) are shorter than the sampling period: their rows rarely get a sample.

Kernels (8192^3; every output is checked against a float64 reference on a 512^3 problem first):
  int8        int8_scaled_mm, per-token / per-channel scales + bf16 bias, bf16 out, data uniform in [-128, 128)
  int8 small  the same kernel on data in [-2, 2) (CUTLASS's examples' default: fewer toggling bits)
  fp8         fp8_blockwise_scaled_mm, groupwise 1x128 / 128x128 scales, bf16 out
  cublas fp8  torch._scaled_mm, rowwise scales (cuBLAS), bf16 out
  cublas bf16 torch.matmul, bf16 in / out (cuBLAS)
Writes clock_limits.json and clock_limits_smi.csv to $OUT; the table is printed last.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from cute_kernels import fp8_blockwise_scaled_mm, int8_scaled_mm  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref  # noqa: E402

OUT = os.environ.get("OUT", ".")
S = 8192
REASONS = ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
           "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost"]


def smi_fields():
    prefix = "clocks_event_reasons"
    if subprocess.run(["nvidia-smi", f"--query-gpu={prefix}.active", "--format=csv"], capture_output=True).returncode:
        prefix = "clocks_throttle_reasons"  # older drivers
    return (["timestamp", "clocks.sm", "power.draw", "power.limit", "temperature.gpu"]
            + [f"{prefix}.{r}" for r in REASONS])


def int8_problem(m, n, k, lo, hi):
    a = torch.randint(lo, hi, (m, k), dtype=torch.int8, device="cuda")
    b = torch.randint(lo, hi, (n, k), dtype=torch.int8, device="cuda").t()
    sa = torch.rand(m, device="cuda") + 0.5
    sb = torch.rand(n, device="cuda") * 1e-3 + 1e-3
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    return (a, b, sa, sb, bias), out


def fp8_problem(m, n, k):
    x = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda") * 0.05
    a, a_s = quantize_fp8_per_token_group(x, 128)
    b, b_s = quantize_fp8_blockwise(w, 128)
    return a, b, to_mn_major(a_s), to_mn_major(b_s), a_s, b_s


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def kernels():
    """(name -> (call, dense tensor-core ops per clock per SM of its data type), name -> relative error of the
    kernels of ours, each checked against float64 on a 512^3 problem)."""
    checks, made = {}, {}
    for name, (lo, hi) in (("int8", (-128, 128)), ("int8 small", (-2, 2))):
        (a, b, sa, sb, bias), out = int8_problem(512, 512, 512, lo, hi)
        int8_scaled_mm(a, b, sa, sb, bias, out=out)
        checks[name] = rel_err(out, int8_scaled_mm_ref(a, b, sa, sb, bias))
        (a, b, sa, sb, bias), out = int8_problem(S, S, S, lo, hi)
        made[name] = ((lambda a=a, b=b, sa=sa, sb=sb, bias=bias, out=out: int8_scaled_mm(a, b, sa, sb, bias, out=out)),
                      8192)
    a, b, sa, sb, a_s, b_s = fp8_problem(512, 512, 512)
    checks["fp8"] = rel_err(fp8_blockwise_scaled_mm(a, b, sa, sb),
                            fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, (1, 128, 128)))
    a, b, sa, sb, _, _ = fp8_problem(S, S, S)
    made["fp8"] = (lambda: fp8_blockwise_scaled_mm(a, b, sa, sb), 8192)
    x = torch.randn(S, S, device="cuda")
    w = torch.randn(S, S, device="cuda")
    xa, wa = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    ra = torch.ones(S, 1, device="cuda")
    rb = torch.ones(1, S, device="cuda")
    made["cublas fp8"] = (lambda: torch._scaled_mm(xa, wa.t(), ra, rb, out_dtype=torch.bfloat16), 8192)
    xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
    made["cublas bf16"] = (lambda: torch.matmul(xb, wb.t()), 4096)
    return made, checks


def graph_of(call, n):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(n):
            call()
    torch.cuda.synchronize()
    return g


def run_phase(g, n_calls):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    e0.record()
    g.replay()
    e1.record()
    torch.cuda.synchronize()
    return {"t0": t0, "t1": time.time(), "us": e0.elapsed_time(e1) * 1e3 / n_calls}


def main():
    fields = smi_fields()
    made, checks = kernels()
    log = os.path.join(OUT, "clock_limits_smi.csv")
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=open(log, "w"))
    time.sleep(1.0)
    phases = []
    for name, (call, peak) in made.items():
        call()
        torch.cuda.synchronize()
        g2 = graph_of(call, 2)
        one = run_phase(g2, 2)["us"]
        n = max(4, int(0.3e6 / one))
        gn = graph_of(call, n)
        time.sleep(0.5)
        for _ in range(12):
            phases.append(dict(run_phase(g2, 2), kernel=name, phase="burst", peak=peak))
            time.sleep(0.05)
        time.sleep(0.5)
        for _ in range(5):
            phases.append(dict(run_phase(gn, n), kernel=name, phase="sustained", peak=peak, calls=n))
        del g2, gn
        time.sleep(1.5)
    smi.terminate()
    smi.wait()
    samples = []
    for line in open(log):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields):
            continue
        try:
            ts = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float(
                "0." + parts[0].split(".")[1])
            samples.append({"t": ts, "mhz": float(parts[1]), "w": float(parts[2]), "limit": float(parts[3]),
                            "temp": float(parts[4]),
                            "reasons": [r for r, v in zip(REASONS, parts[5:]) if v.lower() == "active"]})
        except ValueError:
            continue
    # nvidia-smi's timestamps are this machine's local wall time (ms resolution), the phases' time.time() too
    rows = []
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    for name in made:
        for phase in ("burst", "sustained"):
            ps = [p for p in phases if p["kernel"] == name and p["phase"] == phase]
            inside = [s for s in samples if any(p["t0"] <= s["t"] <= p["t1"] for p in ps)]
            tops = statistics.median(2 * S ** 3 / p["us"] / 1e6 for p in ps)
            row = {"kernel": name, "phase": phase, "tops": tops, "samples": len(inside)}
            if inside:
                # A phase's first and last samples may straddle the idle gaps around it (1980 MHz, ~140 W): where
                # the power cap was active, the clock and power are the medians of the capped samples only.
                capped = [s for s in inside if "sw_power_cap" in s["reasons"]]
                basis = capped or inside
                mhz = statistics.median(s["mhz"] for s in basis)
                row.update(mhz=mhz, watts=statistics.median(s["w"] for s in basis), limit=inside[0]["limit"],
                           temp=max(s["temp"] for s in inside), capped=len(capped),
                           reasons=sorted({r for s in inside for r in s["reasons"]}),
                           per_clock=tops * 1e12 / (sm_count * ps[0]["peak"] * mhz * 1e6))
            rows.append(row)
    json.dump({"device": torch.cuda.get_device_name(), "checks": checks, "rows": rows, "phases": phases,
               "samples": samples, "fields": fields}, open(os.path.join(OUT, "clock_limits.json"), "w"), indent=1)
    print("device:", torch.cuda.get_device_name(), " float64 checks (rel. error):",
          {k: f"{v:.1e}" for k, v in checks.items()})
    print("| kernel | phase | TOPS | MHz | W (limit) | max temp C | of tensor peak at that clock | samples capped | "
          "clock-event reasons |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "mhz" in r:
            print(f"| {r['kernel']} | {r['phase']} | {r['tops']:.0f} | {r['mhz']:.0f} "
                  f"| {r['watts']:.0f} ({r['limit']:.0f}) | {r['temp']:.0f} | {100 * r['per_clock']:.0f}% "
                  f"| {r['capped']} / {r['samples']} "
                  f"| {', '.join(r['reasons']) or '-'} |")
        else:
            print(f"| {r['kernel']} | {r['phase']} | {r['tops']:.0f} | no samples | | | | |")


if __name__ == "__main__":
    main()
