"""Session 42: AwqLinear in its two weight layouts, "checkpoint" (qweight + the layouts its kernels derive) and
"sm90_blob" (the blob alone), on #5's four layers, fp16 and bf16, g128, no bias:

* memory: torch.cuda.memory_allocated held after calls at 1 / 4 / 16 / 64 / 600 tokens (less the per-stream split-K
  workspace), as a multiple of qweight's bytes;
* time: CUDA-graph medians of interleaved rounds at 1-8192 tokens, each layout over its own set of layer copies
  rotated past L2 (bench_awq.py's 240 MB), beside F.linear on the dequantized fp16 / bf16 weight;
* correctness: each layout's output against the float64 reference on the first copy.

    python benchmarks/experiments/awq_blob_layer42.py OUT_JSON [--ms 1,4,16,64,256,1024,4096,8192] [--rounds 3]
"""

import argparse
import gc
import json
import statistics

import torch

from cute_kernels.bench import graph_time_us
from cute_kernels.nn import AwqLinear
from cute_kernels.ops import split_k
from cute_kernels.reference import awq_gemm_ref
from cute_kernels.weight_only import awq_dequantize, clear_weight_caches

CALLS = 16
LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))


def _layer(ic, oc, dtype, layout, seed):
    g = torch.Generator("cuda").manual_seed(seed)
    layer = AwqLinear(ic, oc, 128, bias=False, dtype=dtype, device="cuda")
    layer.qweight.copy_(torch.randint(-2**31, 2**31 - 1, layer.qweight.shape, dtype=torch.int32, device="cuda",
                                      generator=g))
    layer.qzeros.copy_(torch.randint(-2**31, 2**31 - 1, layer.qzeros.shape, dtype=torch.int32, device="cuda",
                                     generator=g))
    layer.scales.copy_((torch.rand(layer.scales.shape, device="cuda", generator=g) * 0.01 + 0.001).to(dtype))
    return layer.set_weight_layout_(layout)


def memory(ic, oc, dtype):
    res = {}
    for layout in ("checkpoint", "sm90_blob"):
        clear_weight_caches()
        gc.collect()
        torch.cuda.synchronize()
        base, scratch = torch.cuda.memory_allocated(), split_k.SCRATCH.nbytes()
        layer = _layer(ic, oc, dtype, layout, 0)
        res[layout] = {}
        with torch.no_grad():
            for m in (1, 4, 16, 64, 600):
                layer(torch.randn(m, ic, device="cuda", dtype=dtype))
                torch.cuda.synchronize()
                held = torch.cuda.memory_allocated() - base - (split_k.SCRATCH.nbytes() - scratch)
                res[layout][m] = held / (ic * oc // 2)
        del layer
    clear_weight_caches()
    return res


def timing(ic, oc, dtype, ms, rounds, sets_mb=240.0):
    n = min(16, max(2, -(-int(sets_mb * 2**20) // (ic * oc // 2))))
    sets = {layout: [_layer(ic, oc, dtype, layout, 100 * i + (layout == "sm90_blob")) for i in range(n)]
            for layout in ("checkpoint", "sm90_blob")}
    dense = [awq_dequantize(l.qweight, l.scales, l.qzeros).t().contiguous()
             for l in sets["checkpoint"][:max(2, -(-int(sets_mb * 2**20) // (ic * oc * 2)))]]
    rows = []
    with torch.no_grad():
        for m in ms:
            x = torch.randn(m, ic, device="cuda", dtype=dtype)
            errs = {}
            for layout, layers in sets.items():
                for layer in layers:
                    out = layer(x)
                first = layers[0]
                ref = awq_gemm_ref(x.cpu(), first.checkpoint_qweight().cpu(), first.scales.cpu(), first.qzeros.cpu())
                out = first(x)
                errs[layout] = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
            t = {"checkpoint": [], "sm90_blob": [], "dense": []}
            for _ in range(rounds):
                for layout, layers in sets.items():
                    t[layout].append(graph_time_us([lambda l=l: l(x) for l in layers], min_calls=CALLS)[0])
                t["dense"].append(graph_time_us([lambda w=w: torch.nn.functional.linear(x, w) for w in dense],
                                                min_calls=CALLS)[0])
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append(dict(m=m, rounds=t, median=med, errs=errs))
            print(f"  {oc}x{ic} {str(dtype)[6:]:8s} M={m:5d} checkpoint {med['checkpoint']:8.2f} blob "
                  f"{med['sm90_blob']:8.2f} us ({med['sm90_blob'] / med['checkpoint']:.3f}x)  dense "
                  f"{med['dense']:8.2f}  err {errs['checkpoint']:.1e} / {errs['sm90_blob']:.1e}", flush=True)
            del x
    del sets, dense
    clear_weight_caches()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ms", default="1,4,16,64,256,1024,4096,8192")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="float16,bfloat16")
    args = ap.parse_args()
    ms = [int(v) for v in args.ms.split(",")]
    result = dict(device=torch.cuda.get_device_name(), layers=[])
    for oc, ic in LAYERS:
        for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
            mem = memory(ic, oc, dtype)
            print(f"{oc}x{ic} {str(dtype)[6:]}: held / qweight after 1/4/16/64/600 tokens: "
                  + "; ".join(f"{k} " + " ".join(f"{v:.2f}" for v in r.values()) for k, r in mem.items()), flush=True)
            rows = timing(ic, oc, dtype, ms, args.rounds)
            result["layers"].append(dict(oc=oc, ic=ic, dtype=str(dtype), memory=mem, rows=rows))
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
