"""Session 22: do int8_scaled_mm and fp8_blockwise_scaled_mm lose time at token counts that are not whole token tiles?

Session 21 found that on the weight-only WGMMA path a TMA box of x that runs far past x's last row makes the whole
GEMM 1.4-1.7x slower (docs/weight_only.md). The int8 / FP8 kernels load the tokens the same way (A of an unswapped
tile, B of a swapped one). For each (op, layer, M) this times, as CUDA-graph medians of interleaved rounds with the
weights rotated over a few copies:

* ``M``      - the op at M tokens, default dispatch (config from the table for M);
* ``M_pad``  - the same compiled config (``config=`` forced, so the same tiles and K split) at M rounded up to whole
  token tiles: strictly more work, no box past the end. ``M`` slower than ``M_pad`` means the boxes past the end
  cost more than the rows they do not compute.

FP8 uses an MN-major a_scale whose column stride is M rounded up to 4, so both M and M_pad stage a_scale by TMA
(``sfa_tma_eligible``) and run the same kernel. Every output is NaN-poisoned and checked against float64 first.
Also times 8192^3 int8 and FP8 (sustained: do_bench_cudagraph; burst: a graph of two calls), the issue anchors.
Writes partial_token_tiles.json to $OUT.

    python benchmarks/experiments/partial_token_tiles.py     (env: PT_OPS, PT_MS, PT_ROUNDS, PT_BIG, PT_PKG, PT_LABEL)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

# PT_PKG: a directory holding another cute_kernels (e.g. the previous commit's) to time instead of this tree's
sys.path.insert(0, os.environ.get("PT_PKG") or os.path.join(os.path.dirname(__file__), "..", ".."))

from cute_kernels import int8_scaled_mm  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.configs import select_sm90_int8  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm, select_config  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref  # noqa: E402

OPS = os.environ.get("PT_OPS", "int8,fp8").split(",")
ROUNDS = int(os.environ.get("PT_ROUNDS", "3"))
BIG = os.environ.get("PT_BIG", "1") == "1"
INT8_LAYERS = [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)]
FP8_LAYERS = [(2112, 7168), (24576, 1536), (7168, 16384), (4096, 7168), (7168, 2048)]
MS = [int(v) for v in os.environ.get("PT_MS", "17,33,65,100,129,200,257,513,1025,4097").split(",")]
COPIES = 3
GW = (1, 128, 128)


def token_tile(cfg) -> int:
    return cfg.tile_n if cfg.swap_ab else cfg.tile_m * (cfg.cluster_m if not cfg.swap_ab else 1)


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def int8_case(n, k, m):
    cfg = select_sm90_int8(m, n, k)
    tt = token_tile(cfg)
    mp = -(-m // tt) * tt
    ws = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t() for _ in range(COPIES)]
    sb = torch.rand(n, device="cuda") * 0.01
    bias = torch.randn(n, device="cuda").bfloat16()
    a = torch.randint(-128, 128, (mp, k), dtype=torch.int8, device="cuda")
    sa = torch.rand(mp, device="cuda") * 0.01
    outs = {rows: torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device="cuda") for rows in (m, mp)}
    err = {}
    for rows in (m, mp):
        int8_scaled_mm(a[:rows], ws[0], sa[:rows], sb, bias, out=outs[rows], config=cfg)
        r = slice(0, min(rows, 256)) if rows < 512 else slice(rows - 256, rows)
        err[rows] = rel(outs[rows][r], int8_scaled_mm_ref(a[r], ws[0], sa[r], sb, bias))

    def calls(rows):
        return [lambda w=w: int8_scaled_mm(a[:rows], w, sa[:rows], sb, bias, out=outs[rows], config=cfg) for w in ws]
    return cfg, mp, err, calls


def fp8_case(n, k, m):
    cfg = select_config(m, n, k)
    tt = token_tile(cfg)
    mp = -(-m // tt) * tt
    bs = []
    for _ in range(COPIES):
        b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
        bs.append((b, b_s.t().contiguous().t()))
    a, a_s = quantize_fp8_per_token_group(torch.randn(mp, k, device="cuda"), 128)
    kb = k // 128
    m4 = -(-mp // 4) * 4
    sa_store = torch.zeros(kb, m4, device="cuda")
    sa_store[:, :mp] = a_s.t()
    sa = sa_store.t()  # [m4, kb] MN-major, column stride m4 (a multiple of 4): TMA-eligible at any row count
    outs = {rows: torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device="cuda") for rows in (m, mp)}
    err = {}
    for rows in (m, mp):
        fp8_blockwise_scaled_mm(a[:rows], bs[0][0], sa[:rows], bs[0][1], scale_granularity=GW, out=outs[rows],
                                config=cfg)
        r = slice(0, min(rows, 256)) if rows < 512 else slice(rows - 256, rows)
        ref = fp8_blockwise_scaled_mm_ref(a[r], bs[0][0], a_s[r], bs[0][1].contiguous(), GW)
        err[rows] = rel(outs[rows][r], ref)

    def calls(rows):
        return [lambda b=b: fp8_blockwise_scaled_mm(a[:rows], b[0], sa[:rows], b[1], scale_granularity=GW,
                                                     out=outs[rows], config=cfg) for b in bs]
    return cfg, mp, err, calls


def big_anchors(rows):
    from triton.testing import do_bench_cudagraph

    m = n = k = 8192
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t()
    sa, sb = torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01
    bias = torch.randn(n, device="cuda").bfloat16()
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    fa, fa_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    fb, fb_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
    fsa, fsb = fa_s.t().contiguous().t(), fb_s.t().contiguous().t()
    int8_call = lambda: int8_scaled_mm(a, w, sa, sb, bias, out=out)  # noqa: E731
    fp8_call = lambda: fp8_blockwise_scaled_mm(fa, fb, fsa, fsb, scale_granularity=GW, out=out)  # noqa: E731
    int8_call()
    e_int8 = rel(out[:256], int8_scaled_mm_ref(a[:256], w, sa[:256], sb, bias))
    fp8_call()
    e_fp8 = rel(out[:256], fp8_blockwise_scaled_mm_ref(fa[:256], fb, fa_s[:256], fb_s, GW))
    for name, call, err in (("int8 8192^3", int8_call, e_int8), ("fp8 8192^3", fp8_call, e_fp8)):
        for rnd in range(2):
            sus = do_bench_cudagraph(call, rep=300, return_mode="median") * 1e3
            burst = statistics.median(graph_time_us([call, call])[0] for _ in range(5))
            rows.append(dict(kind="anchor", name=name, round=rnd, sustained_us=sus, burst_us=burst, err=err,
                             sustained_t=2 * m * n * k / sus / 1e6, burst_t=2 * m * n * k / burst / 1e6))
            print(f"{name} round {rnd}: sustained {sus:.1f} us = {rows[-1]['sustained_t']:.0f} T, burst {burst:.1f} "
                  f"us = {rows[-1]['burst_t']:.0f} T (err {err:.1e})", flush=True)


def main():
    rows = []
    dev = torch.cuda.get_device_name()
    path = os.path.join(os.environ.get("OUT", "."), f"partial_token_tiles{os.environ.get('PT_LABEL', '')}.json")

    def save():
        with open(path, "w") as f:
            json.dump(dict(device=dev, date=time.strftime("%Y-%m-%d"), rows=rows), f, indent=1)
    if BIG:
        big_anchors(rows)
        save()
    for op in OPS:
        layers, case = (INT8_LAYERS, int8_case) if op == "int8" else (FP8_LAYERS, fp8_case)
        for n, k in layers:
            for m in MS:
                cfg, mp, err, calls = case(n, k, m)
                if mp == m:
                    continue
                t = {m: [], mp: []}
                for _ in range(ROUNDS):
                    for r in (m, mp):
                        t[r].append(graph_time_us(calls(r))[0])
                med = {r: statistics.median(v) for r, v in t.items()}
                rows.append(dict(kind="tile", op=op, n=n, k=k, m=m, m_pad=mp, cfg=cfg.describe(), err=err,
                                 us=med[m], us_pad=med[mp], rounds=t, ratio=med[m] / med[mp]))
                print(f"{op} {n}x{k} M={m:5d} [{cfg.describe()}] pad {mp:5d}: {med[m]:8.2f} vs {med[mp]:8.2f} us "
                      f"({med[m] / med[mp]:.3f})  err {max(err.values()):.1e}", flush=True)
                save()
            torch.cuda.empty_cache()
    print("\n| op | layer | M | config | M us | M_pad | M_pad us | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["kind"] == "tile":
            print(f"| {r['op']} | {r['n']}x{r['k']} | {r['m']} | {r['cfg']} | {r['us']:.2f} | {r['m_pad']} | "
                  f"{r['us_pad']:.2f} | {r['ratio']:.3f} |")


if __name__ == "__main__":
    main()
