"""Session 23: tile shapes that fill the GPU where the shipped tables leave SMs idle.

The wave model (``configs.split_cost``) finds two families of problems whose shipped tiles cannot fill 132 SMs:
  * int8 at 129-512 tokens on 4096-wide layers: the 128x128 2x1 row gives 2 x 32 = 64 tiles (half the SMs idle at
    M = 256; the issue's benchmark has no M = 256 row, so it never showed);
  * layers of 7168 / 14336 weight rows (the DeepSeek-V3 and Llama-3 FFN widths, 7 x 2^k): 112 tiles of 64 / 128 rows
    or 448 of 128 x 128 - 0.85 of whole waves at every M. A tile width of 112 (or 224, 56) gives 128 / 512 tiles
    (0.97).
Each problem is timed with the shipped config (``config=None``) and the candidate configs through the op's
``config=`` override: every call float64-checked first (NaN-poisoned out), then CUDA-graph medians with operands
rotated beyond L2, three interleaved rounds. Writes wave_fit.json to $OUT. Env WF_OPS=int8,fp8 selects the ops.
"""
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from cute_kernels import TileConfig, fp8_blockwise_scaled_mm, int8_scaled_mm  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_mn_major  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref  # noqa: E402

OUT = os.environ.get("OUT", ".")
OPS = os.environ.get("WF_OPS", "int8,fp8").split(",")
ROUNDS = 3


def T(tm, tn, cm=1, cn=1, swap=False, split=1):
    return TileConfig(tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn, swap_ab=swap, split_k=split)


def odd_width(tm, tn, swap):
    """A TileConfig with a tile_n that is a multiple of 8 but not 16 (TileConfig refuses those since session 23)."""
    cfg = T(tm, 64, swap=swap)
    object.__setattr__(cfg, "tile_n", tn)
    return cfg


INT8 = [  # (m, n, k, {label: config})
    *[(m, n, k, {"128x128 split4": T(128, 128, split=4), "128x64": T(128, 64), "128x64 2x1": T(128, 64, 2, 1),
                 "swap 64x128 split4": T(64, 128, swap=True, split=4)})
      for m in (192, 256, 384) for n, k in ((4096, 4096), (4096, 14336))],
    *[(m, 14336, 4096, {"128x112": T(128, 112), "64x112": T(64, 112)}) for m in (32, 64, 128)],
    *[(m, 14336, 4096, {"128x112 2x1": T(128, 112, 2, 1), "128x112": T(128, 112)}) for m in (256,)],
    *[(m, 14336, 4096, {"128x224 1x2": T(128, 224, 1, 2), "128x224": T(128, 224)}) for m in (1024, 4096)],
]
FP8 = [
    *[(m, 7168, k, {"64x112": T(64, 112), "64x56": odd_width(64, 56, False)}) for m in (32, 64)
      for k in (16384, 2048)],
    *[(m, 7168, k, {"128x112": T(128, 112), "128x56": odd_width(128, 56, False)}) for m in (128, 256)
      for k in (16384, 2048)],
    *[(m, 7168, k, {"128x112 2x1": T(128, 112, 2, 1), "128x112": T(128, 112)}) for m in (1024,)
      for k in (16384, 2048)],
]


# WF_CONFIRM=1: the shipped dispatch (config=None, with configs.fit_tile_width) against session 22's rows - 128x128 2x1
# for 129-512 tokens, 128x256 1x2 above - on the layers of the benchmark and three the fit flips or leaves alone.
CONFIRM = [(m, n, k, {"session22": T(128, 128, 2, 1)}) for n, k in ((4096, 4096), (4096, 14336), (2048, 4096))
           for m in (129, 192, 256, 320, 384, 512)] + \
          [(m, n, k, {"session22": T(128, 256, 1, 2)}) for n, k in ((14336, 4096), (5120, 4096), (11008, 4096))
           for m in (1024, 2048)] + [(8192, 8192, 8192, {"session22": T(128, 256, 1, 2)})]


# WF_INT8_CHECK=1 (session 24): the shipped int8 dispatch against session 22's row on layers session 23 did not
# measure where fit_tile_width now takes 128x64 (the FP8 analogue lost up to 1.75x on such layers).
INT8_CHECK = [(m, n, k, {"session22": T(128, 128, 2, 1)})
              for n, k, ms in ((11008, 4096, (200, 256)), (28672, 8192, (200,)), (4096, 11008, (200,)),
                               (3072, 4096, (200,)), (13824, 5120, (384, 512)), (5120, 13824, (384,)),
                               (6144, 4096, (512,)), (2048, 16384, (256, 512)))
              for m in ms]


# WF_INT8_CHECK2=1 (session 24): the same for the 224-wide tiles above 512 tokens (session 23 measured 14336 / 5120 /
# 11008 x 4096 only).
INT8_CHECK2 = [(m, n, k, {"session22": T(128, 256, 1, 2)})
               for n, k, ms in ((13824, 5120, (600, 1024)), (5120, 13824, (1024, 2048)), (2112, 7168, (1024, 4096)),
                                (7168, 16384, (1024, 2048)), (3072, 4096, (1024,)), (7168, 2048, (2048,)),
                                (24576, 1536, (1536,)))
               for m in ms]


# WF_ODD=1: did such widths give wrong int8 results too, or only FP8's (session 23 found FP8 64x56 / 128x56 wrong)?
ODD = [(m, 4096, 4096, {"64x56 swap": odd_width(64, 56, True)}) for m in (56, 200)] + \
      [(256, 4096, 4096, {"128x56": odd_width(128, 56, False), "128x40": odd_width(128, 40, False)})]


# WF_MID=1: 65-128 tokens, which run swapped 64 / 128 x 80-128 tiles (tokens on WGMMA's N); at M = 128 on N = K =
# 4096 that took 11.0 µs against 10.3 for M = 256 on 128x64 tiles (session 23 benchmark, H100).
MID = [(m, n, k, {"128x64 split4": T(128, 64, split=4), "128x128 split4": T(128, 128, split=4),
                  "64x64 split4": T(64, 64, split=4), "64x128 split4": T(64, 128, split=4)})
       for n, k in ((4096, 4096), (4096, 14336), (14336, 4096)) for m in (80, 128)]


# WF_FP8_MID=1: FP8 at 129-256 tokens, where the 128x128 split row leaves SMs idle on narrow layers (2112 x 7168 at
# M = 256: 34 tiles x 3 slices = 102 of 132); 64-wide tiles (one b_scale segment each) double the tiles.
FP8_MID = [(m, n, k, {"128x64 split4": T(128, 64, split=4), "128x64 2x1": T(128, 64, 2, 1)})
           for n, k in ((2112, 7168), (4096, 7168), (7168, 2048), (7168, 16384)) for m in (192, 256)]


# WF_FP8_CONFIRM=1: the shipped FP8 dispatch (64-wide tiles at 129-256 tokens where the model takes them) against
# session 22's 128x128 split row.
FP8_CONFIRM = [(m, n, k, {"session22": T(128, 128, split=4)}) for n, k in ((2112, 7168), (4096, 7168))
               for m in (129, 192, 256)]


# WF_MID_CLUSTER=1 (session 30): at 65-128 tokens every weight tile of int8's swapped row reads the whole token tile
# from L2 again (at M = 128 on 4096 x 14336: 117 MB of x against 58.7 MB of weights, ~6.4 TB/s of L2 -> SM traffic);
# a 2-CTA cluster along the weight tiles multicasts it (the kernel's B operand) to both.
MID_CLUSTER = [(m, n, k, {"swap 64 cl2 split4": T(64, tn, 2, 1, swap=True, split=4),
                          "swap 128 cl2 split4": T(128, tn, 2, 1, swap=True, split=4)})
               for n, k in ((4096, 4096), (4096, 14336), (14336, 4096)) for m, tn in ((80, 80), (128, 128))]
# WF_FP8_MID_CLUSTER=1 (session 30): FP8's 65-128-token row runs two 64-row token tiles, each reading the weight tile;
# a 2-CTA cluster along the token tiles multicasts the weight (the kernel's B operand).
FP8_MID_CLUSTER = [(m, n, k, {"64x128 cl2 split8": T(64, 128, 2, 1, split=8),
                              "64x128 cl2 split4": T(64, 128, 2, 1, split=4)})
                   for n, k in ((7168, 16384), (24576, 1536), (4096, 7168), (7168, 2048), (2112, 7168))
                   for m in (96, 128)]

# WF_FP8_MID_CLUSTER_CONFIRM=1 (session 30): the shipped dispatch (2x1 clusters at 65-128 tokens) against the 1x1 row
# of session 29, on the benchmark's narrow layers and five it does not have.
FP8_MID_CLUSTER_CONFIRM = [(m, n, k, {"1x1 (session 29)": T(64, 128, split=8)})
                           for n, k in ((7168, 16384), (4096, 7168), (7168, 2048), (2112, 7168), (576, 7168),
                                        (1536, 7168), (4096, 14336), (2048, 16384), (4096, 4096))
                           for m in (65, 96, 128)]

# WF_FP8_SPLIT_ROW_CLUSTER=1 (session 30): 129-256 tokens run 128-row split-K tiles (128 or 64 wide) as 1x1: two
# token tiles each read the weight tile; the same tiles in a 2x1 cluster multicast it.
FP8_SPLIT_ROW_CLUSTER = [(m, n, k, {"128x128 cl2 split4": T(128, 128, 2, 1, split=4),
                                    "128x64 cl2 split4": T(128, 64, 2, 1, split=4)})
                         for n, k in ((2112, 7168), (4096, 7168), (7168, 2048), (7168, 16384), (24576, 1536),
                                      (4096, 14336))
                         for m in (192, 256)]

# WF_FP8_LONG_K_LOADED=1 (session 30): 65-128 tokens above K = 8192 with an a_scale the consumers load (plain
# MN-major, M not a multiple of 4): the dispatch keeps the 128-row tile there (session 24: the 64-row 1x1 tile lost
# 4-8% on two layers); the 64-row tiles now run as 2x1 clusters.
FP8_LONG_K_LOADED = [(m, n, k, {"64x128 cl2 split8": T(64, 128, 2, 1, split=8), "64x128 split8": T(64, 128, split=8)})
                     for n, k in ((7168, 16384), (4096, 14336), (2048, 16384), (8192, 28672), (7168, 18432))
                     for m in (65, 97, 126)]

# WF_FP8_A_MCAST=1 (session 33): at 64-128 tokens the token tile (the kernel's A; swapped: its B) is read by every
# weight tile's CTA; a 2-CTA cluster across the weight dimension multicasts it (1x2 unswapped, 2x1 swapped).
FP8_A_MCAST = [(64, 24576, 1536, {"64x192 cl1x2 split8": T(64, 192, 1, 2, split=8)}),
               (128, 24576, 1536, {"128x192 cl1x2 split4": T(128, 192, 1, 2, split=4)}),
               (64, 7168, 16384, {"64x128 cl1x2 split8": T(64, 128, 1, 2, split=8)}),
               (64, 4096, 7168, {"64x128 cl1x2 split8": T(64, 128, 1, 2, split=8)}),
               (64, 2112, 7168, {"64x128 cl1x2 split8": T(64, 128, 1, 2, split=8)}),
               (64, 7168, 2048, {"64x64 swap cl2x1 split8": T(64, 64, 2, 1, swap=True, split=8)})]


def int8_case(m, n, k):
    sets = []
    for _ in range(max(2, int(64e6 // (n * k)) + 1)):
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
        b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t()
        sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") / 64
        bias = torch.randn(n, device="cuda").bfloat16()
        sets.append((a, b, sa, sb, bias))
    a, b, sa, sb, bias = sets[0]
    ref = int8_scaled_mm_ref(a, b, sa, sb, bias)

    def call(cfg, s, out=None):
        return int8_scaled_mm(*s, out_dtype=torch.bfloat16, config=cfg, out=out)
    return sets, ref, call


def fp8_case(m, n, k):
    sets = []
    for i in range(max(2, int(64e6 // (n * k)) + 1)):
        a, a_s = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
        b, b_s = quantize_fp8_blockwise(torch.randn(n, k, device="cuda"), 128)
        sets.append((a, b, to_mn_major(a_s), to_mn_major(b_s)))
    ref = fp8_blockwise_scaled_mm_ref(*sets[0], (1, 128, 128))

    def call(cfg, s, out=None):
        return fp8_blockwise_scaled_mm(*s, out_dtype=torch.bfloat16, config=cfg, out=out)
    return sets, ref, call


def main():
    rows = []
    # one env switch per recorded sweep (the first set wins); none set: the INT8 / FP8 candidate sweep
    modes = [("WF_CONFIRM", "int8", CONFIRM), ("WF_MID", "int8", MID), ("WF_FP8_MID", "fp8", FP8_MID),
             ("WF_FP8_CONFIRM", "fp8", FP8_CONFIRM), ("WF_INT8_CHECK", "int8", INT8_CHECK),
             ("WF_INT8_CHECK2", "int8", INT8_CHECK2), ("WF_ODD", "int8", ODD),
             ("WF_MID_CLUSTER", "int8", MID_CLUSTER), ("WF_FP8_MID_CLUSTER", "fp8", FP8_MID_CLUSTER),
             ("WF_FP8_MID_CLUSTER_CONFIRM", "fp8", FP8_MID_CLUSTER_CONFIRM),
             ("WF_FP8_SPLIT_ROW_CLUSTER", "fp8", FP8_SPLIT_ROW_CLUSTER),
             ("WF_FP8_LONG_K_LOADED", "fp8", FP8_LONG_K_LOADED), ("WF_FP8_A_MCAST", "fp8", FP8_A_MCAST)]
    makers = {"int8": int8_case, "fp8": fp8_case}
    chosen = next(((op, problems) for env, op, problems in modes if os.environ.get(env) == "1"), None)
    if chosen is not None:
        cases = [(chosen[0], c, makers[chosen[0]]) for c in chosen[1]]
    else:
        cases = [("int8", c, int8_case) for c in INT8 if "int8" in OPS] + \
                [("fp8", c, fp8_case) for c in FP8 if "fp8" in OPS]
    for op, (m, n, k, cands), make in cases:
        sets, ref, call = make(m, n, k)
        variants = {"shipped": None, **cands}
        ok, errs = {}, {}
        for label, cfg in variants.items():
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            try:
                call(cfg, sets[0], out)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a candidate that does not build is reported and skipped
                print(f"  {op} {m}x{n}x{k} {label}: skipped ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
                continue
            err = ((out.double() - ref).norm() / ref.norm()).item()
            errs[label] = err
            if not err < 1e-2 or bool(out.isnan().any()):
                print(f"  WRONG {op} {m}x{n}x{k} {label}: rel err {err:.3e}", flush=True)
                continue
            ok[label] = cfg
        us = {label: [] for label in ok}
        for _ in range(ROUNDS):
            for label, cfg in ok.items():
                us[label].append(graph_time_us([lambda s=s, c=cfg: call(c, s) for s in sets])[0])
        med = {label: statistics.median(v) for label, v in us.items()}
        rows.append(dict(op=op, m=m, n=n, k=k, us=med, errs=errs, rounds=us))
        base = med.get("shipped")
        print(f"{op} M={m} N={n} K={k}: " + " ".join(
            f"[{l}] {u:.2f}" + ("" if base is None or l == "shipped" else f" ({u / base:.2f})") for l, u in med.items()),
            flush=True)
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), open(os.path.join(OUT, "wave_fit.json"), "w"),
                  indent=1)


if __name__ == "__main__":
    main()
