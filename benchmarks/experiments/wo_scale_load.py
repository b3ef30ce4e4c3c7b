"""Session 5: group scales kept in their own dtype in the step buffers and converted where used (instead of right
after the load). Times awq_gemm and quantized_mm int4 with group-128 scales on the decode path (M in {1, 4, 16},
the benchmark shapes), CUDA-graph medians over weight sets rotated through more than L2, each checked against
float64 first. Run once per kernel version and compare: the variant is wo_scale_load.patch (data archive,
dropped/patches/; against the session-5 tree; measured no gain, not shipped), the recorded run was new, old,
new back to back on one H200 with CUTE_KERNELS_DISK_CACHE=0. Prints one JSON line per case and writes
$OUT/wo_scale_load_<tag>.json."""
import json
import os
import sys

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402

import bench_awq  # noqa: E402
import bench_weight_only as bwo  # noqa: E402
from cute_kernels.formats.bitpack import quantize_weights  # noqa: E402
from cute_kernels.reference import quantized_mm_ref  # noqa: E402
from cute_kernels.weight_only import awq_gemm, quantized_mm  # noqa: E402

tag = sys.argv[1]
rows = []
for oc, ic in bench_awq.SHAPES:
    per_set = ic * oc // 2 + (ic // 128) * oc * 5 // 2
    sets = [bench_awq._awq_set(ic, oc, torch.float16) for _ in range(bwo.n_sets(per_set, 16))]
    for m in (1, 4, 16, 64):
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        err = bench_awq._check(awq_gemm(x, *sets[0]), x, *sets[0])
        t = sorted(bwo.graph_time_us([lambda z=z: awq_gemm(x, *z) for z in sets])[0] for _ in range(3))[1]
        rows.append(dict(op="awq", n=oc, k=ic, m=m, us=t, err=err))
        print(json.dumps(rows[-1]), flush=True)
    del sets
for n, k in [(8192, 8192), (14336, 4096), (4096, 14336)]:
    per_set = n * k // 2 + n * (k // 128) * 4
    sets = [quantize_weights(torch.randn(n, k, device="cuda"), 4, 128) for _ in range(bwo.n_sets(per_set, 16))]
    for m in (1, 4, 16):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w, s, gs = sets[0]
        o = quantized_mm(x, w, s, 4, gs)
        ref = quantized_mm_ref(x.cpu(), w[:256].cpu(), s, 4, gs[:256].cpu())
        err = ((o[:, :256].double().cpu() - ref).abs().max() / ref.abs().max()).item()
        t = sorted(bwo.graph_time_us([lambda z=z: quantized_mm(x, z[0], z[1], 4, z[2]) for z in sets])[0]
                   for _ in range(3))[1]
        rows.append(dict(op="int4 g128", n=n, k=k, m=m, us=t, err=err))
        print(json.dumps(rows[-1]), flush=True)
    del sets
json.dump(dict(device=torch.cuda.get_device_name(), tag=tag, rows=rows),
          open(os.path.join(os.environ.get("OUT", "."), f"wo_scale_load_{tag}.json"), "w"), indent=1)
