"""Session 41: GPU memory an AWQ layer holds after awq_gemm calls at 1, 4, 64 and 600 tokens (fp16, g128): the
checkpoint and every derived layout the caches keep, from torch.cuda.memory_allocated (outputs and x freed; at 600
tokens the WGMMA path's split-K workspace, per stream and not per layer, is in it too), with the decode tiles on the
repack (default) and on the blob (config.AWQ_ONE_COPY).

    python benchmarks/experiments/awq_memory41.py OUT_JSON
"""

import json
import sys

import torch

from cute_kernels.weight_only import awq_gemm, clear_weight_caches, config


def main():
    rows = []
    for one_copy, (oc, ic) in [(c, s) for c in (False, True) for s in ((4096, 4096), (14336, 4096), (4096, 14336))]:
        config.AWQ_ONE_COPY = one_copy
        clear_weight_caches()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        qweight = torch.randint(-2**31, 2**31 - 1, (ic, oc // 8), dtype=torch.int32, device="cuda")
        qzeros = torch.randint(-2**31, 2**31 - 1, (ic // 128, oc // 8), dtype=torch.int32, device="cuda")
        scales = (torch.rand(ic // 128, oc, device="cuda") * 0.01 + 0.001).half()
        ckpt = torch.cuda.memory_allocated() - base
        held = {}
        for m in (1, 4, 64, 600):
            x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
            awq_gemm(x, qweight, scales, qzeros)
            del x
            torch.cuda.synchronize()
            held[m] = torch.cuda.memory_allocated() - base
        row = dict(oc=oc, ic=ic, one_copy=one_copy, checkpoint_mb=ckpt / 1e6, held_mb={m: v / 1e6 for m, v in held.items()},
                   ratio={m: v / ckpt for m, v in held.items()})
        rows.append(row)
        print(f"{oc}x{ic} one_copy={one_copy}: checkpoint {ckpt / 1e6:.1f} MB; held after M=1/4/64/600: "
              + " / ".join(f"{v / 1e6:.1f} MB ({v / ckpt:.2f}x)" for v in held.values()), flush=True)
        del qweight, qzeros, scales
        clear_weight_caches()
    with open(sys.argv[1], "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
