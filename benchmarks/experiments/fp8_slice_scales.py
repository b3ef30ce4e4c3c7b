"""Session 25: FP8 split kernels with each K slice's scales indexed from the slice's first K-tile
(``Fp8BlockwiseGemmSm90.slice_scales_from_zero``) against the previous indexing (from the tensor's first K-tile).

The split variant ran whole tiles 3-10% slower than the unsplit one (tail_split.py, ``bin1``); in SASS its promotion
loop carried the slice's offset through the scale addressing. Both variants are compiled in this process (disk cache
off, so neither is stored under the other's key) and timed on the same operands in interleaved rounds of CUDA-graph
medians, weights rotated beyond L2, outputs NaN-poisoned and checked against float64 first:
  * the decode-size split rows the dispatch runs (swapped M = 1 / 16, 64-row k_pair M = 64, 128-row M = 128 / 256);
  * the large-M row's split kernel run with nothing split (``bin1``) and with its tail split, beside the unsplit one.
Writes fp8_slice_scales.json to $OUT.   env: SS_ROUNDS (3)
"""
import json
import math
import os
import statistics
import sys

os.environ["CUTE_KERNELS_DISK_CACHE"] = "0"
import torch  # noqa: E402

sys.path.insert(0, os.getcwd())
import cute_kernels.ops.fp8_blockwise_scaled_mm as F  # noqa: E402
from cute_kernels import jit_cache  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.configs import raster_for, replace  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major  # noqa: E402
from cute_kernels.ops.split_k import launch_planned, resolve_split  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref  # noqa: E402
from cute_kernels.sm90.fp8_blockwise import Fp8BlockwiseGemmSm90  # noqa: E402
from cute_kernels.sm90.tile_schedule import PersistentTileSchedule  # noqa: E402

ROUNDS = int(os.environ.get("SS_ROUNDS", "3"))
SMS = torch.cuda.get_device_properties(0).multi_processor_count
GW = (1, 128, 128)
DECODE = [(1, 7168, 16384), (16, 4096, 7168), (64, 7168, 16384), (64, 2112, 7168), (128, 4096, 7168),
          (128, 7168, 2048), (256, 4096, 7168), (192, 2112, 7168)]
LARGE = [(4096, 4096, 7168, 192), (1024, 7168, 16384, 192), (4096, 18432, 7168, 192)]


def compiled(cfg, staged, raster, from_zero):
    Fp8BlockwiseGemmSm90.slice_scales_from_zero = from_zero
    jit_cache.clear_memory()
    try:
        return F._compile_sm90(2, torch.bfloat16, GW, cfg, SMS, staged and not cfg.swap_ab, torch.float8_e4m3fn,
                               torch.float8_e4m3fn, raster)
    finally:
        Fp8BlockwiseGemmSm90.slice_scales_from_zero = True


def whole_plan(cfg, m, n, k, raster, slices=1):
    sched = PersistentTileSchedule((cfg.cluster_m, cfg.cluster_n), *raster)
    positions = sched.position_count((-(-m // cfg.tile_m), -(-n // cfg.tile_n), 1))
    csize = cfg.cluster_m * cfg.cluster_n
    slots = cfg.slots(SMS) // csize
    head = positions - 1 if slices == 1 else positions // slots * slots
    tiles = (positions - head) * csize
    return (slices, tiles * slices * cfg.tile_m * cfg.tile_n, tiles, head)


rows = []
for m, n, k, *width in [p + () for p in DECODE] + LARGE:
    a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
    sa = to_tma_aligned_mn_major(a_s)
    b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
    sb = to_mn_major(b_s)
    copies = max(1, min(4, math.ceil(200e6 / b.numel())))
    bs = [b] + [b.clone() for _ in range(copies - 1)]
    ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, GW)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    variants = {}
    if not width:  # the dispatch's own split row
        cfg = F.select_config(m, n, k, 1, SMS, a_scale_staged=True)
        cfg, plan = resolve_split(cfg, m, n, k, 1, SMS)
        if plan is None:
            print(f"{m}x{n}x{k}: {cfg.describe()} not split; skipped", flush=True)
            continue
        raster = raster_for(cfg, m, n, k, 1, SMS)
        plans = {"": plan}
        label = f"{cfg.describe()} {plan[0]} slices"
    else:
        cfg = replace(F.select_config(m, n, k, 1, SMS, a_scale_staged=True), tile_n=width[0], split_tail=F.SPLIT_TAIL)
        raster = raster_for(cfg, m, n, k, 1, SMS)
        unsplit = F._compile_sm90(2, torch.bfloat16, GW, replace(cfg, split_tail=1), SMS, True, a.dtype, b.dtype,
                                  raster)
        variants["unsplit"] = lambda j, fn=unsplit: fn(a, bs[j], out, sa, sb)
        plans = {" bin1": whole_plan(cfg, m, n, k, raster), " tail3": whole_plan(cfg, m, n, k, raster, 3)}
        label = f"{cfg.describe()}"
    for tag, from_zero in (("old", False), ("new", True)):
        fn = compiled(cfg, True, raster, from_zero)
        for ptag, plan in plans.items():
            variants[tag + ptag] = (lambda j, fn=fn, plan=plan:
                                    launch_planned(fn, (a, bs[j], out, sa, sb), plan, a.device, torch.float32))
    errs = {}
    for name, call in variants.items():
        out.fill_(float("nan"))
        call(0)
        torch.cuda.synchronize()
        assert not out.isnan().any(), name
        errs[name] = ((out.double() - ref).norm() / ref.norm()).item()
        assert errs[name] < 1e-2, (name, errs[name])
    times = {name: [] for name in variants}
    for r in range(ROUNDS):
        for name in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
            times[name].append(graph_time_us([lambda j=j, c=variants[name]: c(j) for j in range(copies)])[0])
    med = {name: round(statistics.median(v), 2) for name, v in times.items()}
    rows.append(dict(m=m, n=n, k=k, config=label, us=med, rounds=times, rel_err=errs))
    print(f"{m}x{n}x{k} [{label}] " + "  ".join(f"{nm} {v:.1f}" for nm, v in med.items()), flush=True)
    del bs
    torch.cuda.empty_cache()
json.dump(dict(device=torch.cuda.get_device_name(), rows=rows),
          open(os.path.join(os.environ.get("OUT", "."), "fp8_slice_scales.json"), "w"), indent=1)
