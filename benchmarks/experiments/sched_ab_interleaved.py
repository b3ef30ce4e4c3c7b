"""Session 24: ``sched_ab.py``'s problems with the previous commit's package and this tree's in ONE process, the two
interleaved call by call (each round times old then new, or new then old, alternately), so clock and power drift
cannot favour either. The previous package is a copy renamed to ``cute_kernels_old`` (its absolute imports
rewritten), found on $SAB_OLD_PATH (default .device/old). Args: problem names (``sched_ab.PROBLEMS``); env ROUNDS.
Appends JSON lines to $OUT/sched_ab_interleaved.jsonl. Making the copy (session 24 used the commit before 8d41acb):

    mkdir -p .device/old && git archive 6f519d7 cute_kernels | tar -x -C .device/old
    mv .device/old/cute_kernels .device/old/cute_kernels_old
    grep -rl cute_kernels .device/old/cute_kernels_old | xargs sed -i 's/\bcute_kernels\b/cute_kernels_old/g'
"""
import importlib
import json
import os
import statistics
import sys

sys.path.insert(0, os.environ.get("SAB_OLD_PATH", ".device/old"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

import sched_ab  # noqa: E402  (binds this tree's cute_kernels)
from cute_kernels.bench import graph_time_us  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "8"))


def old_module():
    """sched_ab's problem builders bound to cute_kernels_old."""
    old = importlib.import_module("cute_kernels_old")
    spec = importlib.util.spec_from_file_location("sched_ab_old", sched_ab.__file__)
    mod = importlib.util.module_from_spec(spec)
    src = open(sched_ab.__file__).read().replace("cute_kernels", "cute_kernels_old")
    exec(compile(src, "sched_ab_old", "exec"), mod.__dict__)
    assert mod.cute_kernels_old is old
    return mod


def main():
    names = sys.argv[1:] or list(sched_ab.PROBLEMS)
    old = old_module()
    path = os.path.join(os.environ.get("OUT", "."), "sched_ab_interleaved.jsonl")
    for name in names:
        calls = {}
        for label, mod in (("old", old), ("new", sched_ab)):
            err, c = mod.PROBLEMS[name]()
            assert err < 1e-2, (label, name, err)
            calls[label] = c
        t = {"old": [], "new": []}
        for r in range(ROUNDS):
            for label in (("old", "new") if r % 2 == 0 else ("new", "old")):
                t[label].append(graph_time_us(calls[label])[0])
        med = {k: statistics.median(v) for k, v in t.items()}
        row = dict(device=torch.cuda.get_device_name(), problem=name, us=med, rounds=t)
        print(f"{name:32s} old {med['old']:9.2f}  new {med['new']:9.2f}  new/old {med['new'] / med['old']:.3f}",
              flush=True)
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
        del calls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
