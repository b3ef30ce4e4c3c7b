"""Session 42: host cost of one warm eager call of AwqLinear in its two weight layouts (and of the plain functions
under them), timed as benchmarks/host_overhead.py times the ops (the GPU held busy, 400 calls, median of 5 loops),
4096^2 fp16 g128, with and without a bias, under torch.inference_mode(). Prints µs per call; writes OUT_JSON.

    python benchmarks/experiments/awq_blob_host42.py OUT_JSON
"""

import json
import sys

import torch

sys.path.insert(0, "benchmarks")
from host_overhead import host_us  # noqa: E402

from cute_kernels.nn import AwqLinear  # noqa: E402
from cute_kernels.weight_only import awq_blob_linear, awq_linear  # noqa: E402


def main():
    res = {}
    layers = {}
    for layout in ("checkpoint", "sm90_blob"):
        torch.manual_seed(0)
        layers[layout] = AwqLinear.from_linear(torch.nn.Linear(4096, 4096, device="cuda"), 128,
                                               torch.float16).set_weight_layout_(layout)
    with torch.inference_mode():
        for rnd in range(2):  # ABAB: the figures drift within a run
            for m in (1, 16):
                x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
                for layout, layer in layers.items():
                    res.setdefault(f"AwqLinear {layout} M={m}", []).append(host_us(lambda: layer(x)))
                ck, bl = layers["checkpoint"], layers["sm90_blob"]
                res.setdefault(f"awq_linear M={m} (bias)", []).append(
                    host_us(lambda: awq_linear(x, ck.qweight, ck.scales, ck.qzeros, ck.bias)))
                res.setdefault(f"awq_blob_linear M={m} (bias)", []).append(
                    host_us(lambda: awq_blob_linear(x, bl.blob, bl.scales, bl.qzeros, bl.bias)))
    for k, v in res.items():
        print(f"{k:40s} " + " / ".join(f"{t:6.2f}" for t in v) + " us")
    with open(sys.argv[1], "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), us=res), f, indent=1)


if __name__ == "__main__":
    main()
