"""Session 48: awq_repack's peak CUDA memory and time, before (int32 nibbles of 2048-row chunks into a row-major copy
of the whole weight, then converted to fragment order) and after (uint8 nibbles of ~8M-value chunks written straight
into fragment order). Both outputs are compared byte for byte.

    python benchmarks/experiments/repack_memory48.py OUT_JSON [--layers 8192x8192,...]
"""

import argparse
import json
import time

import torch

from cute_kernels.formats.awq import AWQ_REVERSE_ORDER
from cute_kernels.weight_only import awq_repack
from cute_kernels.weight_only.fragment_order import padded_shape, to_fragment_order


def unpack_int4_before(packed):
    """formats.awq.unpack_int4 as of a38a5de: int32 shifts of every word (4 bytes per value in its temporaries)."""
    shifts = torch.tensor([4 * p for p in AWQ_REVERSE_ORDER], dtype=torch.int32, device=packed.device)
    return ((packed.unsqueeze(-1) >> shifts) & 0xF).reshape(packed.shape[0], -1)


def repack_before(qweight, ic, oc):
    """The codes of awq_repack.repack as of a38a5de (session 47)."""
    icp = -(-ic // 32) * 32
    w = torch.zeros(padded_shape(oc, icp // 2), dtype=torch.uint8, device=qweight.device)
    for r0 in range(0, ic, 2048):
        r1 = min(ic, r0 + 2048)
        qt = unpack_int4_before(qweight[r0:r1]).t()
        w[:oc, r0 // 2:(r0 + qt.shape[1]) // 2] = (qt[:, 0::2] | (qt[:, 1::2] << 4)).to(torch.uint8)
    return to_fragment_order(w)


def measure(fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3
    held = torch.cuda.memory_allocated() - base
    return out, ms, torch.cuda.max_memory_allocated() - base - held


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", default="4096x4096,14336x4096,4096x14336,8192x8192,28672x8192")
    args = ap.parse_args()
    rows = []
    for layer in args.layers.split(","):
        oc, ic = map(int, layer.split("x"))
        qweight = torch.randint(-2**31, 2**31 - 1, (ic, oc // 8), dtype=torch.int32, device="cuda")
        qzeros = torch.randint(-2**31, 2**31 - 1, (ic // 128, oc // 8), dtype=torch.int32, device="cuda")
        scales = (torch.rand(ic // 128, oc, device="cuda") * 0.01 + 0.001).half()
        res = {}
        for name, fn in (("before", lambda: repack_before(qweight, ic, oc)),
                         ("after", lambda: awq_repack.repack(qweight, scales, qzeros, 128).w)):
            fn()  # warm-up (allocator, kernels)
            out, ms, extra = measure(fn)
            res[name] = dict(ms=round(ms, 3), extra_MB=round(extra / 2**20, 1), out=out)
        same = torch.equal(res["before"].pop("out"), res["after"].pop("out"))
        row = dict(oc=oc, ic=ic, weight_MB=oc * ic / 2 / 2**20, equal=same, **res)
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f)


if __name__ == "__main__":
    main()
