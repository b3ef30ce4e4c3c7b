"""Session 18 probe: what keeps group scales (and so their ``wgmma._params`` entry) alive after ``del`` under
compute-sanitizer? ``test_group_parameters_follow_in_place_updates`` (whose scenario this replays) failed only there.
Run it plain and under
``compute-sanitizer --tool memcheck --report-api-errors no python benchmarks/experiments/params_cache_probe.py``.
Session 18 (H100): plain, the scales die and both entries go; under the sanitizer the scales are held by frames of
the op's call chains (down to the allocation line of the parameter tensor), and nothing gc can see holds the deepest
frame: they are kept from C (docs/weight_only.md, "Session 18"). The walk below leaves the probe's own lists out."""
import gc
import sys
import weakref

import torch

from cute_kernels.formats.bitpack import quantize_weights
from cute_kernels.weight_only import quantized_mm, wgmma


def describe(o) -> str:
    if hasattr(o, "f_code"):
        return f"frame {o.f_code.co_filename}:{o.f_lineno} {o.f_code.co_name}"
    if isinstance(o, dict):
        return "dict " + (f"(globals of {o['__name__']})" if "__name__" in o else ",".join(map(str, list(o)[:8])))
    if isinstance(o, (list, tuple)):
        return f"{type(o).__name__} of {len(o)}: " + ",".join(type(e).__name__ for e in o[:8])
    return type(o).__name__


def holders(obj, mine: set) -> list:
    return [r for r in gc.get_referrers(obj) if id(r) not in mine]


def main():
    wgmma.clear_cache()
    torch.manual_seed(7)
    x = torch.randn(24, 512, dtype=torch.bfloat16, device="cuda")
    w, scale, gs = quantize_weights(torch.randn(136, 512, device="cuda"), 4, 128)
    gs = gs.to(torch.bfloat16)
    quantized_mm(x, w, scale, 4, gs, path="wgmma")
    gs.mul_(-2.0)
    quantized_mm(x, w, scale, 4, gs, path="wgmma")  # the warm path, with a cache miss (new version)
    torch.cuda.synchronize()
    print("entries after two calls:", len(wgmma._params))
    ref = weakref.ref(gs)
    del gs
    gc.collect()
    print("entries after del + collect:", len(wgmma._params), "| scales alive:", ref() is not None)
    if ref() is None:
        return
    mine = set()
    level = holders(ref(), mine)
    mine.add(id(level))
    for depth in range(4):
        print(f"level {depth}:")
        nxt = []
        mine.add(id(nxt))
        for o in level:
            print("   ", describe(o))
            found = holders(o, mine)
            mine.add(id(found))
            nxt.extend(f for f in found if not hasattr(f, "f_code") or depth == 0)
        level = nxt[:12]
        mine.add(id(level))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
