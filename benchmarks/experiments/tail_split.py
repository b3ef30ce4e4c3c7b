"""Session 25: the last partial wave split into K slices (``TileConfig.split_tail``) on multi-wave int8 and FP8
problems.

For each problem, side by side in interleaved rounds of CUDA-graph medians (weights rotated beyond L2):
  * before - what session 24 ran: the table's pick with ``split_tail`` off (whole tiles, wave model by whole waves);
  * now    - the table's pick and plan of this code (``select_*`` + ``ops.split_k.resolve_split``);
  * now/1  - now's tile width with whole tiles only (when now splits): what the split itself buys;
  * s2..s4 - now's tile width with the tail forced to 2 / 3 / 4 K slices (head = whole waves), to fit the model;
  * cuBLAS blockwise for FP8 (torch._scaled_mm) as the issue's baseline.
Every variant's output is NaN-poisoned and checked against float64 first (all rows: the split tiles are the last ones).
env: TS_FAMILIES (fp8,int8), TS_FP8 / TS_INT8 ("m,n,k;..."), TS_ROUNDS (3), TS_FORCE (2,3,4), TS_LABEL, TS_GRID (1:
every width of the row x whole / 2-4 tail slices, plus the split binary run whole: ``w<width>/bin1``).
Writes tail_split{TS_LABEL}.json to $OUT.
"""
import json
import math
import os
import statistics
import sys
from dataclasses import replace

import torch

sys.path.insert(0, os.getcwd())
import cute_kernels.configs as C  # noqa: E402
import cute_kernels.ops.fp8_blockwise_scaled_mm as F  # noqa: E402
import cute_kernels.ops.int8_scaled_mm as I  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.configs import raster_for, tail_split  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major, to_tma_aligned_mn_major  # noqa: E402
from cute_kernels.ops.split_k import launch_planned, plan_split_k, resolve_split  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref  # noqa: E402
from cute_kernels.sm90.tile_schedule import PersistentTileSchedule  # noqa: E402


def problems(var, default):
    return [tuple(int(v) for v in p.split(",")) for p in os.environ.get(var, default).split(";") if p]


FP8 = problems("TS_FP8", "1024,4096,7168;4096,4096,7168;1024,7168,16384;4096,7168,16384;2048,7168,16384;"
                         "4096,2112,7168;2048,7168,2048;1024,8192,8192;8192,8192,8192;1024,24576,1536")
INT8 = problems("TS_INT8", "384,13824,5120;512,14336,4096;1024,13824,5120;8192,8192,8192;4096,28672,8192;"
                           "3072,14336,4096;384,6144,4096;1024,5120,13824")
FAMILIES = os.environ.get("TS_FAMILIES", "fp8,int8").split(",")
ROUNDS = int(os.environ.get("TS_ROUNDS", "3"))
FORCE = [int(v) for v in os.environ.get("TS_FORCE", "2,3,4").split(",") if v]
GRID = os.environ.get("TS_GRID", "0") == "1"
SMS = torch.cuda.get_device_properties(0).multi_processor_count
GW = (1, 128, 128)


def selected_without_tail(module, table_name, select, m, n, k):
    """What ``select`` picks with the table's ``split_tail`` off: session 24's dispatch."""
    saved = getattr(module, table_name)
    setattr(module, table_name, tuple((mm, replace(c, split_tail=1)) for mm, c in saved))
    try:
        return select(m, n, k, 1, SMS)
    finally:
        setattr(module, table_name, saved)


def before_fp8(m, n, k):
    return selected_without_tail(F, "SM90_FP8_BLOCKWISE_TABLE", F.select_config, m, n, k)


def before_int8(m, n, k):
    return selected_without_tail(C, "SM90_INT8_TABLE", C.select_sm90_int8, m, n, k)


def forced_plan(cfg, m, n, k, slices):
    """The plan with the tail forced to ``slices`` K slices (head = whole waves), or None if nothing to split."""
    raster = raster_for(cfg, m, n, k, 1, SMS)
    sched = PersistentTileSchedule((cfg.cluster_m, cfg.cluster_n), *raster)
    positions = sched.position_count((-(-m // cfg.tile_m), -(-n // cfg.tile_n), 1))
    csize = cfg.cluster_m * cfg.cluster_n
    slots = cfg.slots(SMS) // csize
    full, tail = divmod(positions, slots)
    if full == 0 or tail == 0:
        return None, raster
    head = full * slots
    split_tiles = (positions - head) * csize
    return (slices, split_tiles * slices * cfg.tile_m * cfg.tile_n, split_tiles, head), raster


rows = []


def run(family, m, n, k):
    copies_for = (lambda nbytes: max(1, min(4, math.ceil(200e6 / nbytes))))
    if family == "fp8":
        a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
        sa = to_tma_aligned_mn_major(a_s)  # the layout the docs recommend (staged by TMA at any M)
        b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda") * 0.05, 128)
        sb = to_mn_major(b_s)
        copies = copies_for(b.numel())
        bs = [b] + [b.clone() for _ in range(copies - 1)]
        ref = fp8_blockwise_scaled_mm_ref(a, b, a_s, b_s, GW)
        now = F.select_config(m, n, k, 1, SMS, a_scale_staged=True)
        before = before_fp8(m, n, k)

        def op(cfg, j, out):
            return F.fp8_blockwise_scaled_mm(a, bs[j], sa, sb, out=out, config=cfg)

        def direct(cfg, plan, raster, j, out):
            fn = F._compile_sm90(2, torch.bfloat16, GW, cfg, SMS, True, a.dtype, b.dtype, raster)
            return launch_planned(fn, (a, bs[j], out, sa, sb), plan, a.device, torch.float32)
    else:
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
        a_s = torch.rand(m, device="cuda") * 0.02 + 1e-3
        b_s = torch.rand(n, device="cuda") * 0.02 + 1e-3
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        copies = copies_for(w.numel())
        bs = [w.t()] + [w.clone().t() for _ in range(copies - 1)]
        ref = int8_scaled_mm_ref(a, bs[0], a_s, b_s, bias)
        now = C.select_sm90_int8(m, n, k, 1, SMS)
        before = before_int8(m, n, k)

        def op(cfg, j, out):
            return I.int8_scaled_mm(a, bs[j], a_s, b_s, bias, out=out, config=cfg)

        def direct(cfg, plan, raster, j, out):
            fn = I._compile_sm90(2, "vector", "vector", "out", torch.bfloat16, cfg, SMS, None, raster)
            return launch_planned(fn, (a, bs[j], out, a_s, b_s, bias), plan, a.device)

    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    now_run, now_plan = resolve_split(now, m, n, k, 1, SMS)
    variants = {"before": (lambda j, cfg=before: op(cfg, j, out)), "now": (lambda j, cfg=now: op(cfg, j, out))}
    if now_plan is not None and not GRID:
        whole = replace(now, split_tail=1)
        if whole != before:
            variants["now/1"] = lambda j, cfg=whole: op(cfg, j, out)
        for s in FORCE:
            plan, raster = forced_plan(now, m, n, k, s)
            if plan is not None and s <= -(-k // 128) and s != now_plan[0]:
                variants[f"s{s}"] = lambda j, cfg=now, plan=plan, raster=raster: direct(cfg, plan, raster, j, out)
    if GRID:  # every width of the row x whole tiles / the tail in 2-4 slices, and the split binary run whole
        widths = F._row_widths(now, m, k) if family == "fp8" else C.INT8_TILE_WIDTHS.get(
            next(c for mm, c in C.SM90_INT8_TABLE if m <= mm).tile_n, (now.tile_n,))
        for w in widths:
            cw = replace(now, tile_n=w)
            variants[f"w{w}/1"] = lambda j, cfg=replace(cw, split_tail=1): op(cfg, j, out)
            for s in FORCE:
                plan, raster = forced_plan(cw, m, n, k, s)
                if plan is not None and s <= -(-k // 128):
                    variants[f"w{w}/s{s}"] = lambda j, cfg=cw, plan=plan, raster=raster: direct(cfg, plan, raster, j,
                                                                                                out)
        plan, raster = forced_plan(now, m, n, k, 1)
        if plan is not None:  # the split binary with one slice for the last position: nothing split, all whole
            positions = plan[3] + plan[2] // (now.cluster_m * now.cluster_n)
            csize = now.cluster_m * now.cluster_n
            bin1 = (1, csize * now.tile_m * now.tile_n, csize, positions - 1)
            variants[f"w{now.tile_n}/bin1"] = lambda j, cfg=now, plan=bin1, raster=raster: direct(cfg, plan, raster,
                                                                                                   j, out)
    if family == "fp8":
        try:
            torch._scaled_mm(a, bs[0].t(), to_mn_major(a_s), b_s.t(), out_dtype=torch.bfloat16)
            variants["cuBLAS"] = lambda j: torch._scaled_mm(a, bs[j].t(), to_mn_major(a_s), b_s.t(),
                                                            out_dtype=torch.bfloat16)
        except RuntimeError as exc:
            print(f"cuBLAS blockwise {m}x{n}x{k}: {str(exc).splitlines()[0][:100]}", flush=True)
    errs = {}
    for name, call in variants.items():
        out.fill_(float("nan"))
        got = call(0)
        got = got if name == "cuBLAS" else out  # cuBLAS returns a new tensor
        torch.cuda.synchronize()
        assert not got.isnan().any(), f"{name}: NaN poison survived"
        errs[name] = ((got.double() - ref).norm() / ref.norm()).item()
        assert errs[name] < (1e-2 if family == "fp8" else 5e-3), (name, errs[name])
    times = {name: [] for name in variants}
    for r in range(ROUNDS):
        for name in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
            times[name].append(graph_time_us([lambda j=j, c=variants[name]: c(j) for j in range(copies)])[0])
    med = {name: round(statistics.median(v), 2) for name, v in times.items()}
    row = dict(family=family, m=m, n=n, k=k, before=before.describe(), now=now_run.describe(),
               plan=None if now_plan is None else dict(slices=now_plan[0], head=now_plan[3], split_tiles=now_plan[2]),
               us=med, rounds=times, rel_err=errs)
    rows.append(row)
    ratio = med["now"] / med["before"]
    plan_s = "-" if now_plan is None else f"s{now_plan[0]} head {now_plan[3]}"
    extra = "  ".join(f"{nm} {v:.1f}" for nm, v in med.items() if nm not in ("before", "now"))
    print(f"{family} {m}x{n}x{k}: before [{before.describe()}] {med['before']:.1f}  now [{now_run.describe()} "
          f"{plan_s}] {med['now']:.1f}  ({ratio:.3f}x)  {extra}", flush=True)
    del bs, variants
    torch.cuda.empty_cache()


for fam in FAMILIES:
    for p in (FP8 if fam == "fp8" else INT8):
        run(fam, *p)

json.dump(dict(device=torch.cuda.get_device_name(), rows=rows),
          open(os.path.join(os.environ.get("OUT", "."), f"tail_split{os.environ.get('TS_LABEL', '')}.json"), "w"),
          indent=1)
print("\nsummary (now / before):")
for r in rows:
    print(f"  {r['family']:4s} {r['m']}x{r['n']}x{r['k']}: {r['us']['now'] / r['us']['before']:.3f}"
          + (f"  (cuBLAS {r['us']['cuBLAS'] / r['us']['now']:.2f}x of ours)" if "cuBLAS" in r["us"] else ""))
