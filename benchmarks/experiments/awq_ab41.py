"""Session 41 A/B in one process: the SM90 decode tiles reading the WGMMA blob (``config.AWQ_ONE_COPY``) against the
shipped repack reader, same calls through awq_gemm, beside the fp16 matmul; bench_awq.py's rotation (4x L2 of weight
sets; ``--sets-mb 120`` for the lighter one), interleaved rounds, CUDA graphs of >= 16 calls, float64-checked.

    python benchmarks/experiments/awq_ab41.py OUT_JSON [--sets-mb MB]
"""

import argparse
import json
import statistics

import torch

from cute_kernels.bench import graph_time_us
from cute_kernels.reference import awq_gemm_ref
from cute_kernels.weight_only import awq_dequantize, awq_gemm, config

CALLS = 16


def _set(ic, oc, dtype):
    return (torch.randint(-2**31, 2**31 - 1, (ic, oc // 8), dtype=torch.int32, device="cuda"),
            (torch.rand(ic // 128, oc, device="cuda") * 0.01 + 0.001).to(dtype),
            torch.randint(-2**31, 2**31 - 1, (ic // 128, oc // 8), dtype=torch.int32, device="cuda"))


def _call(x, s, one_copy):
    config.AWQ_ONE_COPY = one_copy  # read by the cold path only: each flag value has its own warm plans per set
    return awq_gemm(x, *s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sets-mb", type=float, default=240.0)
    args = ap.parse_args()
    rows = []
    for oc, ic in ((4096, 4096), (14336, 4096), (4096, 14336)):
        for dtype in (torch.float16, torch.bfloat16):
            nbytes = ic * oc // 2
            n = min(16, max(2, -(-int(args.sets_mb * 2**20) // nbytes)))
            blob_sets, repack_sets = [_set(ic, oc, dtype) for _ in range(n)], [_set(ic, oc, dtype) for _ in range(n)]
            dense = [awq_dequantize(*s) for s in repack_sets[:max(2, -(-int(args.sets_mb * 2**20) // (ic * oc * 2)))]]
            for m in (1, 4):
                x = torch.randn(m, ic, device="cuda", dtype=dtype)
                errs = {}
                for name, sets, flag in (("blob", blob_sets, True), ("repack", repack_sets, False)):
                    ref = awq_gemm_ref(x.cpu(), *(t.cpu() for t in sets[0]))
                    for s in sets:  # cold calls under the flag: the warm plans keep the path
                        out = _call(x, s, flag)
                    out = _call(x, sets[0], flag)
                    errs[name] = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                config.AWQ_ONE_COPY = False
                t = {"blob": [], "repack": [], "fp16": []}
                for _ in range(5):
                    t["blob"].append(graph_time_us([lambda s=s: awq_gemm(x, *s) for s in blob_sets],
                                                   min_calls=CALLS)[0])
                    t["repack"].append(graph_time_us([lambda s=s: awq_gemm(x, *s) for s in repack_sets],
                                                     min_calls=CALLS)[0])
                    t["fp16"].append(graph_time_us([lambda w=w: torch.matmul(x, w) for w in dense],
                                                   min_calls=CALLS)[0])
                med = {k: statistics.median(v) for k, v in t.items()}
                rows.append(dict(oc=oc, ic=ic, m=m, dtype=str(dtype), sets=n, rounds=t, median=med, errs=errs))
                print(f"{oc}x{ic} M={m} {str(dtype)[6:]:9s} blob {med['blob']:6.2f} repack {med['repack']:6.2f} us "
                      f"({med['blob'] / med['repack']:.3f}x)  fp16 {med['fp16']:6.2f}: x{med['fp16'] / med['blob']:.2f}"
                      f" / x{med['fp16'] / med['repack']:.2f}  err {errs['blob']:.1e} / {errs['repack']:.1e}",
                      flush=True)
            del blob_sets, repack_sets, dense
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), sets_mb=args.sets_mb, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
