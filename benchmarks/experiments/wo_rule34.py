"""Session 34: the dispatch under session 33's entries and session 34's (grouped 4-bit and AWQ earlier on the WGMMA
path now that it decodes them with one fma per pair: ``config.WGMMA_MIN_M_GROUPED``, ``_GROUPED_LARGE``,
``_AWQ_LARGE``, ``_GROUPED_MANY_WAVES``, ``_AWQ_MANY_WAVES``), interleaved, on layers the new entries were not
fitted to (WO_LAYERS), AWQ (fp16 x) and int4 g128 (bf16 x) at WO_MS tokens; the paths each rule picks recorded beside.
Checked against float64 first (``wo_crossover.check``, both paths). Writes $OUT/wo_rule34.json.
"""
import importlib
import json
import os

import torch

import wo_crossover
from wo_crossover import rule_rows, shipped_path
from cute_kernels.weight_only import config

OUT = os.environ.get("OUT", ".")
LAYERS = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "WO_LAYERS", "8192x4096,4096x11008,13824x5120,10240x4096,6144x4096,3584x3584,16384x4096,12288x8192").split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,2,4,6,8,10").split(","))
FAMILIES = tuple(os.environ.get("WO_FAMS", "awq,int4g").split(","))
ROUNDS = int(os.environ.get("WO_ROUNDS", "3"))
NAMES = ("WGMMA_MIN_M_GROUPED", "WGMMA_MIN_M_GROUPED_LARGE", "WGMMA_MIN_M_AWQ_LARGE", "WGMMA_MIN_M_GROUPED_MANY_WAVES",
         "WGMMA_MIN_M_AWQ_MANY_WAVES")
NEW = tuple(getattr(config, name) for name in NAMES)
OLD = ({1: 4, 2: 8, 4: 12}, {1: 1, 2: 1, 4: 6}, None, {1: 1, 2: 1}, 8)  # session 33's
RULES = {"old": OLD, "new": NEW}


def use(rule):
    for name, value in zip(NAMES, RULES[rule]):
        setattr(config, name, value)
    for mod in ("awq", "quantized_mm"):
        importlib.import_module(f"cute_kernels.weight_only.{mod}")._plans.clear()


def main():
    wo_crossover.FAMILIES = FAMILIES
    wo_crossover.check()
    rows = rule_rows(FAMILIES, LAYERS, MS, RULES, use, shipped_path, ROUNDS)
    use("new")
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_rule34.json"), "w") as f:
        json.dump({"device": dev, "rows": rows}, f)
    print(f"\n{dev}: the dispatch, new / old rule time, * = the rules pick different paths")
    print(f"{'fam':5s} {'layer':>12s} " + " ".join(f"M={m:<4d}" for m in MS))
    for fam in FAMILIES:
        for n, k in LAYERS:
            rs = [r for r in rows if r["fam"] == fam and r["N"] == n and r["K"] == k]
            print(f"{fam:5s} {n:6d}x{k:<5d} " + " ".join(
                f"{r['new'] / r['old']:.2f}{'*' if r['paths']['old'] != r['paths']['new'] else ' '} " for r in rs))


if __name__ == "__main__":
    main()
