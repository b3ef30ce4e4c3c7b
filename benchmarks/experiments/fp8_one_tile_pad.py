"""Session 24: FP8 token counts below one 128-row token tile - does padding the tokens to the tile pay for its copy?

Session 22 moved the last token tile back to end at the last token (``Sm90GemmKernel.tile_shifts``), which fixed
every token count of two or more tiles. A problem of a single token tile has nowhere to move: at M = 65 on the
128-row split-K row the A box runs 63 rows past the last token, and 7168 x 16384 took 1.23x the time of M = 128
there (H200, docs/fp8_blockwise.md). Weight-only pads x to whole tiles in that case (``wgmma.x_rows``).

Per (layer, M), CUDA-graph medians of interleaved rounds, weights rotated over a few copies, each variant's output
NaN-poisoned and checked against float64 first:

* ``plain``  - the op at M tokens, default dispatch;
* ``padded`` - what a padding op would do, timed whole: ``a`` and ``a_scale`` padded to 128 rows (one F.pad each:
  zero codes, unit scales), the same config on 128 rows into a fresh [128, N] output, the first M rows returned;
* ``rows64`` - the 64-row split-K tile (``_UNSWAPPED_SMALL_M``, the narrow layers' choice at 65-128 tokens) at M,
  whose second token tile moves back instead of running past the end;
* ``pad_only`` - the two F.pads alone (what the copy costs).

Layers: those whose 65-128-token problems take the 128-row tile (K > 8192, or more than half as many 128-column weight
tiles as SMs). Writes fp8_one_tile_pad.json to $OUT.
env: OTP_MS (default 65,80,96,112), OTP_ROUNDS (3), OTP_LAYERS ("NxK,..."), OTP_VARIANTS (names above), OTP_LABEL,
OTP_SA_STRIDE4=1 (a_scale's column stride rounded up to 4 rows, so that tiles that can stage it by TMA do at every M;
default: stride M, which stages it only where M % 4 == 0)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import (  # noqa: E402
    _UNSWAPPED_SMALL_M, fp8_blockwise_scaled_mm, select_config)
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402

LAYERS = [tuple(int(v) for v in lk.split("x")) for lk in
          os.environ.get("OTP_LAYERS", "7168x16384,4096x14336,24576x1536,14336x4096").split(",")]
VARIANTS = os.environ.get("OTP_VARIANTS", "plain,padded,rows64,pad_only").split(",")
MS = [int(v) for v in os.environ.get("OTP_MS", "65,80,96,112").split(",")]
ROUNDS = int(os.environ.get("OTP_ROUNDS", "3"))
COPIES = 3
GW = (1, 128, 128)
TILE = 128


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def pad_tokens(a, sa, rows):
    """a [M, K] e4m3 -> [rows, K] (zero codes); MN-major sa [M, Kb] -> MN-major [rows, Kb] (unit scales)."""
    m = a.shape[0]
    ap = F.pad(a.view(torch.uint8), (0, 0, 0, rows - m)).view(a.dtype)
    sap = F.pad(sa.t(), (0, rows - m), value=1.0).t()
    return ap, sap


def case(n, k, m):
    cfg = select_config(m, n, k)
    bs = []
    for _ in range(COPIES):
        b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
        bs.append((b, b_s.t().contiguous().t()))
    a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    if os.environ.get("OTP_SA_STRIDE4", "0") == "1":
        # MN-major with the column stride rounded up to 4 (vLLM's padded layout): TMA-staged a_scale at any M
        m4 = -(-m // 4) * 4
        store = torch.zeros(k // 128, m4, device="cuda")
        store[:, :m] = a_s.t()
        sa = store.t()[:m]
    else:
        sa = a_s.t().contiguous().t()  # MN-major, the DeepSeek-V3 layout (column stride M)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    ref = fp8_blockwise_scaled_mm_ref(a, bs[0][0], a_s, bs[0][1].contiguous(), GW)

    def plain(b, config=cfg):
        return fp8_blockwise_scaled_mm(a, b[0], sa, b[1], scale_granularity=GW, out=out, config=config)

    def padded(b):
        ap, sap = pad_tokens(a, sa, TILE)
        outp = torch.empty((TILE, n), dtype=torch.bfloat16, device="cuda")
        fp8_blockwise_scaled_mm(ap, b[0], sap, b[1], scale_granularity=GW, out=outp, config=cfg)
        return outp[:m]

    def rows64(b):
        return plain(b, replace_split(cfg))

    err = {}
    for name, fn in (("plain", plain), ("padded", padded), ("rows64", rows64)):
        if name not in VARIANTS:
            continue
        out.fill_(float("nan"))
        res = fn(bs[0])
        res = out if res is None else res
        assert not res.isnan().any(), name
        err[name] = rel(res, ref)
        assert err[name] < 1e-2, (name, err[name])
    calls = {
        "plain": [lambda b=b: plain(b) for b in bs],
        "padded": [lambda b=b: padded(b) for b in bs],
        "rows64": [lambda b=b: rows64(b) for b in bs],
        "pad_only": [lambda: pad_tokens(a, sa, TILE) for _ in bs],
    }
    calls = {name: c for name, c in calls.items() if name in VARIANTS}
    return cfg, err, calls


def replace_split(cfg):
    """The 64-row row as select_config would size it for narrow layers (split 8)."""
    return _UNSWAPPED_SMALL_M


def main():
    rows = []
    dev = torch.cuda.get_device_name()
    path = os.path.join(os.environ.get("OUT", "."), f"fp8_one_tile_pad{os.environ.get('OTP_LABEL', '')}.json")
    for n, k in LAYERS:
        for m in MS:
            cfg, err, calls = case(n, k, m)
            t = {name: [] for name in calls}
            for _ in range(ROUNDS):
                for name, c in calls.items():
                    t[name].append(graph_time_us(c)[0])
            med = {name: statistics.median(v) for name, v in t.items()}
            rows.append(dict(n=n, k=k, m=m, cfg=cfg.describe(), err=err, us=med, rounds=t))
            print(f"{n}x{k} M={m:4d} [{cfg.describe()}] " + "  ".join(f"{nm} {v:7.2f}" for nm, v in med.items()),
                  flush=True)
            with open(path, "w") as f:
                json.dump(dict(device=dev, date=time.strftime("%Y-%m-%d"), rows=rows), f, indent=1)
        torch.cuda.empty_cache()
    print(f"\n{dev}\n| layer | M | config | plain | padded (incl. pad) | 64-row | pad only | padded / plain |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        u = r["us"]
        g = {name: u.get(name, float("nan")) for name in ("plain", "padded", "rows64", "pad_only")}
        print(f"| {r['n']}x{r['k']} | {r['m']} | {r['cfg']} | {g['plain']:.2f} | {g['padded']:.2f} | "
              f"{g['rows64']:.2f} | {g['pad_only']:.2f} | {g['padded'] / g['plain']:.3f} | "
              f"64-row / plain {g['rows64'] / g['plain']:.3f}")


if __name__ == "__main__":
    main()
