"""Session 21: which operand makes a nearly empty second token tile slow - x's loads or out's stores?

wo_partial_tile.py: 8-bit, 8192^2, 128-token tiles unsplit, M = 129 81.7 us, the same on x and out padded to 256
rows 54.5. Here the kernel is compiled with separate row counts for x and out (the tile grid comes from out), so
one of the two can be padded alone:
  x129/out129   as shipped without padding (both views 129 rows: out-of-range rows in x's loads and out's stores)
  x256/out129   x padded to 256 rows (no out-of-range x rows), out a 129-row view of a 256-row buffer
  x129/out256   x 129 rows, out 256 rows (the stores of the second tile land in full rows)
  x256/out256   both padded
Same for 256-token tiles at M = 257 (512 padded), and single token tiles: 256 at M = 129, 128 at M = 1. CUDA-graph medians of three interleaved rounds; results checked on
the first rows against float64. Writes wo_partial_tile_split.json to $OUT.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402

from cute_kernels import arch as _arch  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.compile_utils import fake_stream, fake_tensor, kernel_view  # noqa: E402
from cute_kernels.configs import TileConfig  # noqa: E402
from cute_kernels.epilogues import Accumulator, Compute, EpilogueTree, ScalarArgument  # noqa: E402
from cute_kernels.reference import quantized_mm_ref  # noqa: E402
from cute_kernels.sm90.weight_only_wgmma import WeightOnlyWgmmaSm90  # noqa: E402
from cute_kernels.weight_only import wgmma  # noqa: E402
from cute_kernels.weight_only.formats import format_by_key  # noqa: E402

N = K = 8192


def build(cfg, sm_count):
    """wgmma.build's unsplit 8-bit bf16 variant without group parameters, x and out with their own row counts."""
    fmt = format_by_key("int8")
    n, k = cute.sym_int32(divisibility=8), cute.sym_int32(divisibility=8)
    f_blob = fake_tensor(cutlass.Int64, (cute.sym_int32(), cute.sym_int32(divisibility=2)), stride_div=2)
    fx = fake_tensor(cutlass.BFloat16, (cute.sym_int32(), k), stride_div=8)
    fo = fake_tensor(cutlass.BFloat16, (cute.sym_int32(), n), stride_div=8)
    kernel = WeightOnlyWgmmaSm90(cfg, EpilogueTree(Compute("mul", Accumulator(), ScalarArgument("scale"))), fmt,
                                 wgmma.NO_GROUP, False, sm_count=sm_count)

    @cute.jit
    def launch(blob: cute.Tensor, x: cute.Tensor, out: cute.Tensor, scale: cutlass.Float32, stream):
        kernel(kernel_view(blob, 0, 1), kernel_view(x, 0, 1), kernel_view(out, 1, 0), (scale,), stream)

    return cute.compile(launch, f_blob, fx, fo, cutlass.Float32(1.0), fake_stream(),
                        options="--enable-tvm-ffi --gpu-arch sm_90a")


def main():
    sms = _arch.sm_count(0)
    sets = [torch.randint(0, 256, (N, K), dtype=torch.uint8, device="cuda") for _ in range(3)]
    blobs = [wgmma.cached_blob(w, 8, "int8", K) for w in sets]
    rows = {}
    fns = {}
    for tile_n, m, mp in ((128, 129, 256), (256, 257, 512), (256, 129, 256), (128, 1, 128)):
        if tile_n not in fns:
            fns[tile_n] = build(TileConfig(tile_m=128, tile_n=tile_n, cluster_m=1, cluster_n=1), sms)
        fn = fns[tile_n]
        xbig = torch.zeros(mp, K, dtype=torch.bfloat16, device="cuda")
        xbig[:m] = torch.randn(m, K, device="cuda").to(torch.bfloat16)
        obig = torch.empty(mp, N, dtype=torch.bfloat16, device="cuda")
        for xr in (m, mp):
            for orows in (m, mp):
                label = f"t{tile_n} M={m} x{xr}/out{orows}"
                x, out = xbig[:xr], obig[:orows]
                out.fill_(float("nan"))
                fn(blobs[0], x, out, 0.01)
                torch.cuda.synchronize()
                r = min(4, m)
                ref = quantized_mm_ref(x[:r].cpu(), sets[0][:256].cpu(), 0.01, 8)
                err = ((out[:r, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
                calls = [lambda b=b, x=x, out=out, fn=fn: fn(b, x, out, 0.01) for b in blobs]
                rows[label] = dict(calls=calls, err=err, us=[])
    for _ in range(3):
        for label, r in rows.items():
            r["us"].append(graph_time_us(r["calls"])[0])
    res = {label: dict(us=statistics.median(r["us"]), rounds=r["us"], err=r["err"]) for label, r in rows.items()}
    for label, r in res.items():
        print(f"{label:24s} {r['us']:8.2f} us  err {r['err']:.1e}")
    with open(os.path.join(os.environ.get("OUT", "."), "wo_partial_tile_split.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=res), f, indent=1)


if __name__ == "__main__":
    main()
