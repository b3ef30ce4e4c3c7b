"""Session 28: cluster split-K (``Sm90GemmKernel.split_cluster``) against the workspace fix-up.

Decode-size problems split K so that their few output tiles fill the GPU; each split tile's slices met in a global
workspace (``split_k_fixup``: stripe stores, one GPU-scope fence, an acq_rel atomic, the last slice's stripe loads -
~0.6 µs of an ~8.7 µs int8 4096^2 call, session 13). With ``split_cluster`` the S slices of a tile run as one cluster
of S CTAs and ranks > 0 send their partials to rank 0's shared memory (16-byte st.async, completing bytes on an
mbarrier); rank 0 adds them in rank order and runs the epilogue. ``ops.split_k.cluster_split`` decides per plan.

Per problem, through the public ops (``weight_preload.case``: weights rotated beyond L2): "ws" = the workspace
fix-up (``split_k.SPLIT_CLUSTER_SLICES = ()``), "cl" = cluster split-K for the slice counts in SC_SLICES. Check
first: both NaN-poisoned against float64, and cl == ws bit for bit (int32 partials are exact; float partials are
added in the same slice order). Then CUDA-graph medians of back-to-back calls, interleaved over SC_ROUNDS rounds,
with the plan's slices and whether cl applied. int8 also runs ragged / batched extras (check only). Env: SC_FAMS
(int8,fp8,awq,int4,int1), SC_MS / SC_LAYERS (as weight_preload's WP_MS / WP_LAYERS), SC_SLICES ("2"), SC_ROUNDS
(5), SC_CHECK_ONLY. Writes $OUT/split_cluster.json and prints a table.
"""
import json
import os
import statistics
import sys

for _name in ("MS", "LAYERS"):  # weight_preload reads its WP_ variables at import
    if os.environ.get(f"SC_{_name}"):
        os.environ[f"WP_{_name}"] = os.environ[f"SC_{_name}"]
sys.path[:0] = ["benchmarks/experiments", "benchmarks"]
import torch

import weight_preload as wp
from cute_kernels import arch as _arch
from cute_kernels.bench import graph_time_us
from cute_kernels.configs import select_sm90_int8
from cute_kernels.ops import split_k
from cute_kernels.reference import int8_scaled_mm_ref

OUT = os.environ.get("OUT", ".")
FAMS = os.environ.get("SC_FAMS", "int8,fp8,awq,int4,int1").split(",")
SLICES = tuple(int(v) for v in os.environ.get("SC_SLICES", "2").split(","))
ROUNDS = int(os.environ.get("SC_ROUNDS", "5"))
CHECK_ONLY = bool(int(os.environ.get("SC_CHECK_ONLY", "0")))
INT8_EXTRAS = [(5, 2056, 1040, 1), (17, 4104, 4096, 1), (3, 1032, 2048, 2), (40, 3000, 4112, 1)]


def setting(name: str):
    split_k.SPLIT_CLUSTER_SLICES = SLICES if name == "cl" else ()
    wp.set_variant("rule")  # the shipped preload rule; clears every op's plan cache


def int8_extras():
    """Ragged and batched int8 problems, both settings bit for bit and against float64."""
    rows = []
    for m, n, k, batch in INT8_EXTRAS:
        lead = (batch,) if batch > 1 else ()
        a = torch.randint(-128, 128, (*lead, m, k), dtype=torch.int8, device="cuda")
        b = torch.randint(-128, 128, (*lead, n, k), dtype=torch.int8, device="cuda").transpose(-1, -2)
        sa, sb = torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01
        bias = torch.randn(n, device="cuda").bfloat16()
        outs = {}
        for name in ("ws", "cl"):
            setting(name)
            outs[name] = torch.full((*lead, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            wp.int8_scaled_mm(a, b, sa, sb, bias, out=outs[name])
        ref = int8_scaled_mm_ref(a.cpu(), b.cpu(), sa.cpu(), sb.cpu(), bias.cpu())
        err = wp.rel_err(outs["cl"], ref)
        sms = _arch.sm_count(0)
        cfg, split = split_k.resolve_split(select_sm90_int8(m, n, k, batch, sms), m, n, k, batch, sms)
        row = {"fam": "int8", "m": m, "n": n, "k": k, "L": batch, "err": err,
               "cluster": split_k.cluster_split(cfg, split, sms), "same": torch.equal(outs["ws"], outs["cl"])}
        row["ok"] = row["same"] and err < 2e-2
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main():
    torch.manual_seed(0)
    checks, rows = [], []
    if "int8" in FAMS:
        checks += int8_extras()
    for fam in FAMS:
        for n, k in wp.LAYERS[fam]:
            for m in wp.MS[fam]:
                calls, check, nbytes = wp.case(fam, m, n, k)
                outs, errs = {}, {}
                for name in ("ws", "cl"):
                    setting(name)
                    errs[name] = check()
                    outs[name] = check.out.clone()
                same = torch.equal(outs["ws"], outs["cl"])
                ok = same and errs["cl"] < 2e-2
                checks.append({"fam": fam, "m": m, "n": n, "k": k, "err": errs["cl"], "same": same, "ok": ok})
                if not ok:
                    print("CHECK FAILED", checks[-1], flush=True)
                if CHECK_ONLY:
                    continue
                times = {"ws": [], "cl": []}
                for _ in range(ROUNDS):
                    for name in times:
                        setting(name)
                        times[name].append(graph_time_us(calls)[0])
                row = {"fam": fam, "m": m, "n": n, "k": k, "weight_MB": nbytes / 1e6,
                       "ws": statistics.median(times["ws"]), "cl": statistics.median(times["cl"]), "rounds": times}
                rows.append(row)
                print(json.dumps({kk: v for kk, v in row.items() if kk != "rounds"}), flush=True)
                del calls
                torch.cuda.empty_cache()
    setting("cl")
    print(f"checked {len(checks)}: {sum(c['ok'] for c in checks)} ok", flush=True)
    if CHECK_ONLY:
        return
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "split_cluster.json"), "w") as f:
        json.dump({"device": dev, "slices": SLICES, "checks": checks, "rows": rows}, f, indent=1)
    print(f"\n{dev}: µs, CUDA-graph medians of {ROUNDS} interleaved rounds (ws = workspace fix-up, cl = cluster "
          f"split-K for slices {SLICES}; rows where no plan qualifies read ~1.00)")
    print("| op | M | N | K | ws | cl | cl / ws |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['fam']} | {r['m']} | {r['n']} | {r['k']} | {r['ws']:.2f} | {r['cl']:.2f} | "
              f"{r['cl'] / r['ws']:.3f} |")


if __name__ == "__main__":
    main()
