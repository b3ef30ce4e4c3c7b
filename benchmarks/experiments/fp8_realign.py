"""Session 24: should the op copy an a_scale that TMA cannot stage (K-major, or MN-major with a column stride that is
not a multiple of 4 rows) into the TMA-aligned layout before the call? The copy costs a small kernel; staging pays
4-25% on the tiles that stage (docs/fp8_blockwise.md, session 24). Per (layer, M), CUDA-graph medians of interleaved
rounds, weights rotated beyond L2:

* ``as given``    - the op with the caller's a_scale (``KIND``: ``mn`` = plain to_mn_major, ``k`` = K-major as the
                    quantizer returns it), default dispatch (loaded by the consumers);
* ``realigned``   - the same call preceded by the copy (``torch.empty`` in the aligned layout + ``copy_``), so the
                    dispatch sees a staged a_scale;
* ``copy only``   - the copy alone.

Each variant's output is float64-checked first. Writes fp8_realign_<KIND>.json to $OUT.
env: RA_MS (default 129,200,300,513,1023,2045,4093), RA_LAYERS, RA_KIND (mn | k), RA_ROUNDS (3)"""
import json
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm, select_config, sfa_tma_eligible  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402

GW = (1, 128, 128)
MS = [int(v) for v in os.environ.get("RA_MS", "129,200,300,513,1023,2045,4093").split(",")]
LAYERS = [tuple(int(v) for v in lk.split("x")) for lk in
          os.environ.get("RA_LAYERS", "7168x16384,24576x1536,7168x2048,4096x7168,2112x7168").split(",")]
KIND = os.environ.get("RA_KIND", "mn")
ROUNDS = int(os.environ.get("RA_ROUNDS", "3"))


def realign(s):
    rows, cols = s.shape
    store = torch.empty((cols, -(-rows // 4) * 4), device=s.device, dtype=s.dtype)
    out = store.t()[:rows]
    out.copy_(s)
    return out


rows = []
for n, k in LAYERS:
    b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
    copies = max(1, min(4, math.ceil(150e6 / b.numel())))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    sb = to_mn_major(b_s)
    for m in MS:
        a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
        sa = to_mn_major(a_s) if KIND == "mn" else a_s
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ref = fp8_blockwise_scaled_mm_ref(a[:128], b, a_s[:128], b_s, GW)
        fns = {"as given": lambda j: fp8_blockwise_scaled_mm(a, bs[j], sa, sb, out=out),
               "realigned": lambda j: fp8_blockwise_scaled_mm(a, bs[j], realign(sa), sb, out=out),
               "copy only": lambda j: realign(sa)}
        for name in ("as given", "realigned"):
            out.fill_(float("nan"))
            fns[name](0)
            assert not out.isnan().any(), name
            err = ((out[:128].double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (name, err)
        t = {name: [] for name in fns}
        for _ in range(ROUNDS):
            for name, fn in fns.items():
                t[name].append(graph_time_us([lambda j=j, fn=fn: fn(j) for j in range(copies)])[0])
        med = {name: statistics.median(v) for name, v in t.items()}
        cfgs = {"as given": select_config(m, n, k, a_scale_staged=sfa_tma_eligible(sa, GW)).describe(),
                "realigned": select_config(m, n, k).describe()}
        rows.append(dict(n=n, k=k, m=m, kind=KIND, cfg=cfgs, us=med, rounds=t))
        print(f"{n}x{k} M={m:5d} as given {med['as given']:8.2f} [{cfgs['as given']}]  realigned "
              f"{med['realigned']:8.2f} [{cfgs['realigned']}]  copy {med['copy only']:5.2f}  "
              f"ratio {med['realigned'] / med['as given']:.3f}", flush=True)
    del bs
    torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(), rows=rows),
          open(os.path.join(os.environ.get("OUT", "."), f"fp8_realign_{KIND}.json"), "w"), indent=1)
