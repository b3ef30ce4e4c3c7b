"""Session 24: FP8 at M = 1024 / 4096 on the DeepSeek-V3 layers (where #3's benchmark has ours at 0.82-0.93x cuBLAS
blockwise) with every tile width the table offers forced through ``config=`` (128 / 160 / 192 wide, 128 rows, 2x1
cluster; the shipped pick is 128 on all eight), and cuBLAS blockwise beside them. Interleaved rounds of CUDA-graph
medians, weights rotated beyond L2, each output NaN-poisoned and checked against float64 first (a slice).
Writes fp8_large_m_widths{LW_LABEL}.json to $OUT.   env: LW_ROUNDS (3), LW_MS (1024,4096), LW_LAYERS ("NxK,..."),
LW_CLUSTERS ("2x1,1x2": cluster shapes to try), LW_SPLIT / LW_WIDTHS (e.g. 4 / 64,128,160,192 with
LW_CLUSTERS=1x1: the 129-256-token split row), LW_ROWS (tile heights, e.g. 128,64: 64-row tiles split twice as far), LW_STAGED (1: a_scale in the TMA-aligned layout, staged by the 160/192-wide tiles; 0: plain to_mn_major, staged only
when M % 4 == 0), LW_LABEL"""
import json
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.configs import TileConfig  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major  # noqa: E402
from cute_kernels.ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm, select_config  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402

GW = (1, 128, 128)
LAYERS = [tuple(int(v) for v in lk.split("x")) for lk in
          os.environ.get("LW_LAYERS", "24576x1536,7168x16384,4096x7168,7168x2048").split(",")]
STAGED = os.environ.get("LW_STAGED", "1") == "1"
CLUSTERS = [tuple(int(v) for v in c.split("x")) for c in os.environ.get("LW_CLUSTERS", "2x1").split(",")]
SPLIT = int(os.environ.get("LW_SPLIT", "1"))  # 4: the 129-256-token row (128 rows, 1x1, split-K up to 4)
WIDTHS = [int(v) for v in os.environ.get("LW_WIDTHS", "128,160,192").split(",")]
ROWS = [int(v) for v in os.environ.get("LW_ROWS", "128").split(",")]  # tile heights; 64-row tiles split up to 8  # a_scale TMA-eligible (aligned stride) or plain to_mn_major
MS = [int(v) for v in os.environ.get("LW_MS", "1024,4096").split(",")]
ROUNDS = int(os.environ.get("LW_ROUNDS", "3"))
rows = []
for n, k in LAYERS:
    for m in MS:
        a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
        sa = to_tma_aligned_mn_major(a_s) if STAGED else to_mn_major(a_s)
        b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
        copies = max(1, min(4, math.ceil(150e6 / b.numel())))
        bs = [b] + [b.clone() for _ in range(copies - 1)]
        sb = to_mn_major(b_s)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ref = fp8_blockwise_scaled_mm_ref(a[:128], b, a_s[:128], b_s, GW)
        variants = {}
        for tm, (cm, cn), w in [(tm, c, w) for tm in ROWS for c in CLUSTERS for w in WIDTHS]:
            cfg = TileConfig(tile_m=tm, tile_n=w, cluster_m=cm, cluster_n=cn,
                             split_k=SPLIT if tm == 128 or SPLIT == 1 else 2 * SPLIT)
            out.fill_(float("nan"))
            fp8_blockwise_scaled_mm(a, b, sa, sb, out=out, config=cfg)
            assert not out.isnan().any()
            err = ((out[:128].double() - ref).norm() / ref.norm()).item()
            assert err < 1e-2, (w, err)
            name = f"{tm}x{w}" if (cm, cn) == (2, 1) else f"{tm}x{w} {cm}x{cn}"
            variants[name] = [lambda j=j, cfg=cfg: fp8_blockwise_scaled_mm(a, bs[j], sa, sb, out=out, config=cfg)
                                    for j in range(copies)]
        cublas = [lambda j=j: torch._scaled_mm(a, bs[j].t(), to_mn_major(a_s), b_s.t(), out_dtype=torch.bfloat16)
                  for j in range(copies)]
        try:
            cublas[0]()
            variants["cuBLAS blockwise"] = cublas
        except RuntimeError as exc:  # cuBLAS refuses some M (e.g. M = 1023: CUBLAS_STATUS_NOT_SUPPORTED)
            print(f"cuBLAS blockwise at M={m}: {str(exc).splitlines()[0][:100]}", flush=True)
        t = {name: [] for name in variants}
        for _ in range(ROUNDS):
            for name, calls in variants.items():
                t[name].append(graph_time_us(calls)[0])
        med = {name: statistics.median(v) for name, v in t.items()}
        rows.append(dict(m=m, n=n, k=k, staged=STAGED, shipped=select_config(m, n, k).describe(), us=med, rounds=t))
        print(f"M={m} {n}x{k} [{rows[-1]['shipped']}] " + "  ".join(f"{nm} {v:.1f}" for nm, v in med.items()),
              flush=True)
        del bs, variants
        torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(), rows=rows),
          open(os.path.join(os.environ.get("OUT", "."), f"fp8_large_m_widths{os.environ.get('LW_LABEL', '')}.json"), "w"),
          indent=1)
