"""Session 7: SM clock and power while the 8192^3 int8 kernel runs, short bursts vs sustained (issue #2's 1500 TOPS
target: session 2 measured ~1550 TOPS in short CUDA-graph bursts and ~1350 sustained).

nvidia-smi samples clocks.sm / power.draw / the active clock-event reasons every 50 ms in the background while
(a) 12 bursts of 2 calls with a host sync in between and (b) one graph of 400 back-to-back calls (~0.3 s of
uninterrupted int8 WGMMA) replayed 5 times run. Writes int8_clocks.json (per-phase TOPS and the samples) to $OUT.
"""
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from cute_kernels import int8_scaled_mm  # noqa: E402

OUT = os.environ.get("OUT", ".")
M = N = K = 8192
a = torch.randint(-128, 128, (M, K), dtype=torch.int8, device="cuda")
b = torch.randint(-128, 128, (N, K), dtype=torch.int8, device="cuda").t()
sa = torch.rand(M, device="cuda") + 0.5
sb = torch.rand(N, device="cuda") + 0.5
out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
call = lambda: int8_scaled_mm(a, b, sa, sb, out=out)  # noqa: E731
for _ in range(3):
    call()
torch.cuda.synchronize()

log = os.path.join(OUT, "int8_clocks_smi.csv")
reasons = "clocks_event_reasons.active"  # older drivers: clocks_throttle_reasons.active
if subprocess.run(["nvidia-smi", f"--query-gpu={reasons}", "--format=csv"], capture_output=True).returncode:
    reasons = "clocks_throttle_reasons.active"
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu=timestamp,clocks.sm,power.draw,power.limit,{reasons}",
                        "--format=csv,noheader,nounits", "-lms", "50"], stdout=open(log, "w"))
time.sleep(1.0)
phases = {}


def graph_of(n):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for _ in range(n):
            call()
    return g


def timed(g, n_calls, label):
    t0 = time.time()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    g.replay()
    e1.record()
    torch.cuda.synchronize()
    us = e0.elapsed_time(e1) * 1e3 / n_calls
    phases.setdefault(label, []).append({"t0": t0, "t1": time.time(), "us": us, "tops": 2 * M * N * K / us / 1e6})


g2, g400 = graph_of(2), graph_of(400)
for _ in range(12):
    timed(g2, 2, "burst of 2")
    time.sleep(0.05)
time.sleep(1.0)
for _ in range(5):
    timed(g400, 400, "graph of 400")
time.sleep(0.5)
smi.terminate()
samples = [line.split(", ") for line in open(log) if line.strip()]
json.dump({"device": torch.cuda.get_device_name(), "phases": phases, "samples": samples},
          open(os.path.join(OUT, "int8_clocks.json"), "w"), indent=1)
for label, ps in phases.items():
    tops = sorted(p["tops"] for p in ps)
    print(f"{label}: TOPS median {tops[len(tops) // 2]:.0f} (min {tops[0]:.0f}, max {tops[-1]:.0f})")
print("samples (time, clock MHz, power W, power limit W, reasons):", len(samples))
for s in samples[::4]:
    print("  ", " ".join(s))
