"""Session 32: the weight-only WGMMA path's K split on large layers whose plan makes many waves of (tile, slice)
units (12288-24576 rows at 1-16 tokens: ``wgmma.split_waves`` > 2, where the path is slow at few tokens). Plans of the
same compiled kernels, the split given at launch: "ship" (every tile split, ``wgmma.launch_variant``), "unsplit",
"tailS" (the full waves run whole tiles, the last partial wave's tiles in S slices: the base kernel's split head, as
int8 / FP8 use since session 25), beside the decode path forced through the op. Checked against float64 first;
CUDA-graph medians of interleaved rounds, weight copies rotated past L2. Writes $OUT/wo_tail_split.json.
"""
import json
import os
from dataclasses import replace

import torch

from cute_kernels.ops.split_k import launch_planned
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.weight_only import wgmma
from cute_kernels.weight_only.awq_repack import kernel_weights
from wo_crossover import call, family, interleaved_medians, weight_copies

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WO_LAYERS", "12288x4096,24576x1536,22016x4096,20480x4096,18432x7168").split(","))
CASES = tuple((f, int(m)) for f, m in (c.split(":") for c in os.environ.get(
    "WO_CASES", "awq:1,awq:8,awq:16,int4g:8,int4g:16,int2:1,int2:8").split(",")))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
SMS = 132


def wgmma_runner(fam, m, n, k, variant):
    """callable(x, wt, out) running the WGMMA path with this variant's split plan."""
    dtype, group, bits = family(fam)
    cfg = wgmma.select_config(m, n, k, SMS)
    fmt_key = "awq" if fam == "awq" else f"int{bits}"
    split_cfg = replace(cfg, split_k=wgmma.MAX_SPLIT_K)
    tiles = -(-n // cfg.tile_m) * -(-m // cfg.tile_n)
    run_cfg, options, split = wgmma.launch_variant(bits, cfg, SMS, m, n, k)  # ship (the tails keep its options)
    if variant == "unsplit":
        run_cfg, options, split = wgmma.launch_variant(bits, replace(cfg, split_k=1), SMS, m, n, k)
    elif variant != "ship":
        slices, slots = int(variant[4:]), cfg.slots(SMS)
        head = tiles // slots * slots  # the full waves' tiles run whole
        if head in (0, tiles):
            return None
        split = (slices, (tiles - head) * slices * cfg.tile_m * cfg.tile_n, tiles - head, head)
    fn = wgmma.compile_wgmma(fmt_key, dtype, dtype, group is not None or fam == "awq",
                             group or wgmma.NO_GROUP, run_cfg if split is None else split_cfg, SMS, options)

    def run(x, wt, out):
        if fam == "awq":
            kw = kernel_weights(wt[0], wt[1], wt[2], group)
            blob, params = wgmma.cached_blob(kw.w, 4, "awq", k), wgmma.cached_params("awq", kw.scales, kw.zeros, dtype)
            scale = 1.0
        else:
            blob = wgmma.cached_blob(wt[0], bits, fmt_key, k)
            params = None if wt[2] is None else wgmma.cached_params(fmt_key, wt[2], None, dtype)
            scale = float(wt[1])
        launch_planned(fn, (blob, x, out, scale, params), split, x.device, torch.float32)
        return out
    return run


def main():
    bad, rows = 0, []
    for n, k in LAYERS:
        for fam in sorted({f for f, _ in CASES}):
            dtype, group, bits = family(fam)
            wts = weight_copies(fam, n, k)
            for m in [mm for f, mm in CASES if f == fam]:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                wt = wts[0]
                ref = (awq_gemm_ref(x.cpu(), *(t.cpu() for t in wt)) if fam == "awq" else
                       quantized_mm_ref(x.cpu(), wt[0].cpu(), wt[1], bits,
                                        None if wt[2] is None else wt[2].float().cpu()))
                fns = {}
                for v in ("ship", "unsplit", "tail2", "tail3", "tail4"):
                    f = wgmma_runner(fam, m, n, k, v)
                    if f is not None:
                        fns[v] = (lambda w, f=f: f(x, w, out))
                        out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                        f(x, wt, out)
                        err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                        if out.isnan().any() or err > (1.5e-3 if dtype == torch.float16 else 8e-3):
                            bad += 1
                            print(f"CHECK FAILED {fam} {n}x{k} M={m} {v}: {err:.2e}", flush=True)
                fns["decode"] = lambda w: call(fam, x, w, out, "decode")
                out = torch.empty(m, n, dtype=dtype, device="cuda")
                med, times = interleaved_medians(fns, wts, ROUNDS)
                row = {"fam": fam, "M": m, "N": n, "K": k, "waves": wgmma.split_waves(n, k, SMS, m), **med,
                       "all": times}
                rows.append(row)
                print(json.dumps({a: b for a, b in row.items() if a != "all"}), flush=True)
            del wts
            torch.cuda.empty_cache()
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_tail_split.json"), "w") as f:
        json.dump({"device": dev, "checks_failed": bad, "rows": rows}, f)
    print(f"\n{dev}: µs (checks failed: {bad})")
    for r in rows:
        print(f"{r['fam']:5s} {r['N']}x{r['K']} M={r['M']:2d} waves {r['waves']:.2f} " + " ".join(
            f"{v}:{r[v]:.1f}" for v in ("decode", "ship", "unsplit", "tail2", "tail3", "tail4") if v in r))


if __name__ == "__main__":
    main()
