"""Sessions 15-16: the WGMMA weight-only path as a weight stream at 1-64 tokens.

Session 15 timed the pipeline options of ``WeightOnlyWgmmaSm90`` (A fragments in flight, K-tiles per stage, how far
ahead group parameters load; its variant set is this script at f858431, its data in data/session15_h100/) and found a
fixed ~140 ns per K-tile per SM at 1-16 tokens, the same for 1- and 2-bit weights. Session 16's hypothesis: every CTA
reads the same K-tile of x (one 128-byte line per token row) from L2 at about the same moment, so the one L2 slice
holding a line serves ~128 requests per K-tile: 128 x 128 B at ~64 B/clk is ~256 clocks, ~140 ns at 1.8 GHz,
independent of the token count (at M = 16 there are 16 lines on 16 slices) and of the weight's bits. Variants:
  * ship: the shipped defaults; rot (``rotate_k``): each work tile starts its K loop at its own K-tile and wraps;
  * probes (wrong results, timing only): "nodecode" skips the decode; "pipeline" only waits for and releases the
    stages (the producer's TMA stream with no consumer work: the floor of the per-stage cost), with and without rot.
Runs 1-3 (data/session16_h100/wo_wgmma_small_run{1,2,3}.json) ran this script at commit 57604e7, whose kernel had
``rotate_k`` and ``param_depth`` options (removed since): rot is no faster anywhere, so the hypothesis is rejected;
the group parameters are what the AWQ / grouped decode costs (nodecode also drops their loads, which become dead
code) - run 2's probe "noparams" (constant scales and zero points instead of the loads, the decode unchanged) and
p4 (loads four K-tiles ahead) separate them, run 3 repeats it with the parameters as one word per (group, row).
Since then the parameters come with each stage by TMA; "ship" is that kernel (run "tma_params" and, with the decode
contexts precomputed on the host, "context_words"). Last, w2 / w4 / w8 (``l2_warmup``): the producer asks L2 for the
first 2 / 4 / 8 K-tiles of its first work tile before the PDL wait, as the int8 and FP8 ops do (2 K-tiles there);
run "l2_warmup" (all five variants' first run) and "l2_warmup_ab" (ship / w4, two runs) - 4 K-tiles became the 4-bit
default, so since then "ship" has it for 4-bit weights and w2 / w4 / w8 override it.
Session 17 added k1 / k2 / k4 (``k_tiles_per_stage``; k2w2 also halves the L2 warm-up, which counts stages) - two
4-bit K-tiles per stage became the default on 16-token tiles (data/session17_h100/wo_wgmma_small_kps.json) - and
s1 / s2 / s4 / s8: the shipped kernel with the K split forced instead of the wave model's choice.
Session 21 added the int8 family (8-bit weights, new on this path) and n128 / n128s1 (128-token tiles above 128
tokens, with the wave model's K split or none) for the large-M split question (data/session21_h100/).
Session 20 added several CTAs per SM (c2a2, m64c2, m64c3a2, m64c4a2; a2 alone as the control) and 64-row tiles
(m64): data/session20_h100/wo_wgmma_occupancy.json and wo_wgmma_m64c2.json. "ship" is always the 128-row tile with
one CTA per SM; since then the op ("current") runs m64c2 on layers below config.WGMMA_LARGE_LAYER at <= 32 tokens.
Session 26 ran p2 / m64c2p2 here: the producer asking for its first two stages before the rest of its ring, a
``Sm90GemmKernel`` option that was not kept (docs/int8_scaled_mm.md, "Session 26"; data/session26/).
Per problem: these variants, the current dispatch of the op (``quantized_mm`` / ``awq_gemm`` with no path), torch.matmul
on the dense weight in x's dtype, and a bare read (copy_bandwidth's Triton read) of the weight's bytes.

Correctness first: every compiled variant (not the probes) against float64 on a ragged problem (partial last stage),
NaN-poisoned output. Timing: CUDA-graph medians (cute_kernels.bench.graph_time_us), weight copies rotated past L2.
``python benchmarks/experiments/wo_wgmma_small.py`` prints a table; writes $OUT/wo_wgmma_small.json (WO_MS, WO_FAMS
select token counts and families, WO_VARIANTS variants, WO_PROBES probes, WO_LAYERS layers). ``... profile FAM
VARIANT M [N K]``: one launch of a variant (ncu target).
"""
import json
import os
import sys

sys.path[:0] = ["benchmarks"]
import torch

from copy_bandwidth import read_sized
from cute_kernels import arch as _arch
from cute_kernels.bench import graph_time_us
from cute_kernels.configs import TileConfig, best_split
from cute_kernels.formats.awq import awq_dequantize_float, awq_quantize
from cute_kernels.formats.bitpack import quantize_weights, unpack_weights
from cute_kernels.ops.split_k import launch_planned
from cute_kernels.reference import awq_gemm_ref, quantized_mm_ref
from cute_kernels.sm90 import weight_only_wgmma as wok
from cute_kernels.weight_only import awq_gemm, awq_repack, quantized_mm, wgmma

OUT = os.environ.get("OUT", ".")
LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))
if os.environ.get("WO_LAYERS"):  # e.g. "1024x4096,6144x4096" (N x K)
    LAYERS = tuple(tuple(int(v) for v in layer.split("x")) for layer in os.environ["WO_LAYERS"].split(","))
MS = tuple(int(m) for m in os.environ.get("WO_MS", "1,16,32,64").split(","))
L2_MARGIN = 150 << 20


VARIANTS = {fam: {"ship": {}, "w2": {"l2_warmup": 2}, "w4": {"l2_warmup": 4}, "w8": {"l2_warmup": 8},
                  "k1": {"k_tiles_per_stage": 1}, "k2": {"k_tiles_per_stage": 2}, "k4": {"k_tiles_per_stage": 4},
                  "k2w2": {"k_tiles_per_stage": 2, "l2_warmup": 2},
                  # the op's kernel with the K split forced to 1 / 2 / 4 / 8 slices instead of the wave model's
                  "s1": {"split": 1}, "s2": {"split": 2}, "s4": {"split": 4}, "s8": {"split": 8},
                  # session 20: several CTAs per SM (``ctas_per_sm``; the wave model counts SMs x CTAs slots), with
                  # two A fragments in flight where the consumers' register share is too small for four (ptxas
                  # serializes the WGMMAs then), and 64-row tiles (one consumer warpgroup per CTA)
                  "a2": {"a_buffers": 2}, "c2a2": {"ctas_per_sm": 2, "a_buffers": 2},
                  "m64": {"tile_m": 64}, "m64c2": {"tile_m": 64, "ctas_per_sm": 2},
                  "m64c3a2": {"tile_m": 64, "ctas_per_sm": 3, "a_buffers": 2},
                  "m64c4a2": {"tile_m": 64, "ctas_per_sm": 4, "a_buffers": 2},
                  # session 21: 128-token tiles above 128 tokens (twice the tiles: fewer K splits needed), with the
                  # wave model's split or none
                  "n128": {"tile_n": 128}, "n128s1": {"tile_n": 128, "split": 1}}
            for fam in ("awq", "int4g", "int4", "int2", "int1", "int8")}  # {} = the defaults
PROBES = {"int4": {"nodecode": {}, "pipeline": {}}, "int1": {"nodecode": {}, "pipeline": {}},
          "awq": {"nodecode": {}, "noparams": {}, "noscale": {}, "noscale_m64c2": {"tile_m": 64, "ctas_per_sm": 2}},
          "int4g": {"noparams": {}}}
if os.environ.get("WO_NO_PROBES"):
    PROBES = {}
FAMILIES = tuple(os.environ.get("WO_FAMS", "awq,int4g,int4,int2,int1").split(","))
if os.environ.get("WO_VARIANTS"):  # only these variants (names of VARIANTS), no probes unless WO_PROBES names some
    _keep = os.environ["WO_VARIANTS"].split(",")
    VARIANTS = {f: {v: o for v, o in vs.items() if v in _keep} for f, vs in VARIANTS.items()}
    _probes = os.environ.get("WO_PROBES", "").split(",")
    PROBES = {f: {v: o for v, o in ps.items() if v in _probes} for f, ps in PROBES.items()}


class NoDecode(wok.WeightOnlyWgmmaSm90):
    """Timing probe: the codes' words go to the A fragment undecoded (wrong results)."""

    @wok.cute.jit
    def decode(self, words, frag, ct, ctxs):
        regs = wok.cute.recast_tensor(frag, wok.Uint32)
        for pair in wok.cutlass.range_constexpr(wok.PAIRS_PER_K_TILE):
            regs[pair] = words[pair % len(words)] ^ wok.Uint32(pair)


class NoParams(wok.WeightOnlyWgmmaSm90):
    """Timing probe: constant decode-context words (scale 1.0 in fp16 bits, zero point 8) instead of the staged ones;
    the decode runs as shipped (wrong results)."""

    @wok.cute.jit
    def param_words(self, s_params, rows, j, stage):
        words = [wok.Uint32(0x3C003C00), wok.Uint32(0xE408E408)]  # scale 1.0 (fp16), AWQ's -(1024 + 8)
        return [words[:self.words_per_group] for _ in range(2 * self.groups_per_tile)]


class NoScale(wok.WeightOnlyWgmmaSm90):
    """Timing probe (session 20): AWQ's decode without its scale multiply, (u - z) only - the decode a promoted
    scale would leave (wrong results: scale 1): bounds what promoting AWQ's group scales could gain."""

    @wok.cute.jit
    def decode_contexts(self, ct, s_params, rows, j, stage):
        return [(self.fmt.group_ctx_words(ct, w)[0], None) for w in self.param_words(s_params, rows, j, stage)]


class PipelineOnly(wok.WeightOnlyWgmmaSm90):
    """Timing probe: the consumers wait for each stage and release it at once (no loads, decode or WGMMA; the
    epilogue stores zeros)."""

    @wok.cute.jit
    def mainloop(self, tiled_mma, ab_pipe, tCrA, tCrB, acc, read, release, k_begin, k_tiles, tile, tCcD, tensors):
        read.reset_count()
        release.reset_count()
        acc.fill(0)
        for _ in range(k_tiles):
            ab_pipe.consumer_wait(read)
            ab_pipe.consumer_release(release)
            read.advance()
            release.advance()
        return read, release


_compiled = {}


def compiled(fam, x_dtype, sd, group, tile_n, variant, split=True):
    key = (fam, x_dtype, sd, group, tile_n, variant, split)
    if key not in _compiled:
        probe = variant in PROBES.get(fam, {})
        opts = dict(PROBES[fam][variant] if probe else VARIANTS[fam][variant])
        stages = opts.pop("stages", 0)
        opts.pop("split", None)  # a launch option (``launcher``), not a kernel option
        opts.pop("tile_n", None)  # ``launcher``'s: part of the key
        tile_m = opts.pop("tile_m", 128)
        ctas = opts.pop("ctas_per_sm", 1)
        cfg = TileConfig(tile_m=tile_m, tile_n=tile_n, ctas_per_sm=ctas, cluster_m=1, cluster_n=1,
                         split_k=wgmma.MAX_SPLIT_K if split else 1, stages=stages)
        orig = wok.WeightOnlyWgmmaSm90
        if probe:
            wok.WeightOnlyWgmmaSm90 = (PipelineOnly if variant.startswith("pipeline") else
                                       NoParams if variant.startswith("noparams") else
                                       NoScale if variant.startswith("noscale") else NoDecode)
        try:
            fmt_key = "int4" if fam == "int4g" else fam
            _compiled[key] = wgmma.build(fmt_key, x_dtype, x_dtype, sd is not None, group, cfg, kernel_options=opts)
        finally:
            wok.WeightOnlyWgmmaSm90 = orig
    return _compiled[key]


def tile_n_for(m):
    return next((t for t in wgmma.TILE_N_CHOICES if t >= m), wgmma.TILE_N_CHOICES[-1])


def launcher(fam, variant, m, n, k, sms, x_dtype, sd, group):
    """fn(x, w_or_kw, out, scale, gs) launching the variant, split by the wave model. Runs 1-3 and the M = 64 run
    launched the split variant even with one slice (14336 x 4096); since then one slice runs the unsplit kernel, as
    the op does."""
    opts = VARIANTS.get(fam, {}).get(variant) or PROBES.get(fam, {}).get(variant, {})
    tile_n = opts.get("tile_n") or tile_n_for(m)
    tile_m = opts.get("tile_m", 128)
    tiles = -(-n // tile_m) * -(-m // tile_n)
    s = opts.get("split") or best_split(tiles, tile_m, wgmma.MAX_SPLIT_K, -(-k // wgmma.K_TILE),
                                        sms * opts.get("ctas_per_sm", 1))
    fn = compiled(fam, x_dtype, sd, group, tile_n, variant, split=s > 1)
    split = (s, tiles * s * tile_m * tile_n, tiles, 0) if s > 1 else None  # every tile split: head 0
    bits = {"awq": 4, "int4g": 4, "int4": 4, "int2": 2, "int1": 1, "int8": 8}[fam]
    fmt_key = "int4" if fam == "int4g" else fam

    def call(x, w, out, scale, gs, zeros):
        blob = wgmma.cached_blob(w, bits, fmt_key, k)
        params = None if gs is None and zeros is None else wgmma.cached_params(fmt_key, gs, zeros, x.dtype)
        launch_planned(fn, (blob, x, out, float(scale), params), split, x.device, torch.float32)

    call.split = s
    return call


def make_weights(fam, n, k, copies, dtype):
    out = []
    for _ in range(copies):
        if fam == "awq":
            q, z, s = awq_quantize(torch.randn(k, n, device="cuda") * 0.05, 128, dtype)
            out.append(("awq", q, s, z, awq_repack.kernel_weights(q, s, z, 128)))
        else:
            bits = int(fam[3])
            w, s, gs = quantize_weights(torch.randn(n, k, device="cuda"), bits, 128 if fam == "int4g" else None)
            out.append((fam, w, s, None if gs is None else gs.to(dtype)))
    return out


def run_variant(call, wt, x, out):
    if wt[0] == "awq":
        kw = wt[4]
        call(x, kw.w, out, 1.0, kw.scales, kw.zeros)
    else:
        call(x, wt[1], out, wt[2], wt[3], None)


def family(fam):
    """(x dtype, group-scale dtype, group, bits) of a family: AWQ fp16 g128; int4g int4 with bf16 group scales g128;
    intB per-tensor scale; bf16 x for the signed formats."""
    dtype = torch.float16 if fam == "awq" else torch.bfloat16
    sd = torch.float16 if fam == "awq" else (torch.bfloat16 if fam == "int4g" else None)
    group = 128 if fam in ("awq", "int4g") else wgmma.NO_GROUP
    bits = 4 if fam == "awq" else int(fam[3])
    return dtype, sd, group, bits


def reference(fam, x, wt):
    if fam == "awq":
        return awq_gemm_ref(x.cpu(), wt[1].cpu(), wt[2].cpu(), wt[3].cpu())
    return quantized_mm_ref(x.cpu(), wt[1].cpu(), wt[2], family(fam)[3],
                            None if wt[3] is None else wt[3].float().cpu())


def check_all(sms):
    rows = []
    for fam in FAMILIES:
        dtype, sd, group, bits = family(fam)
        for m in MS:
            # ragged N; K of 33 / 34 K-tiles: a partial last stage at 2 / 4 K-tiles per stage
            n, k = 520, (2176 if group == 128 else 2112)
            torch.manual_seed(m)
            x = torch.randn(m, k, dtype=dtype, device="cuda")
            wt = make_weights(fam, n, k, 1, dtype)[0]
            ref = reference(fam, x, wt)
            for v in VARIANTS[fam]:
                out = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
                run_variant(launcher(fam, v, m, n, k, sms, dtype, sd, group), wt, x, out)
                torch.cuda.synchronize()
                err = ((out.double().cpu() - ref).abs().max() / ref.abs().max()).item()
                ok = not out.isnan().any().item() and err < (1.5e-3 if dtype == torch.float16 else 8e-3)
                rows.append({"fam": fam, "M": m, "variant": v, "err": err, "ok": ok})
                if not ok:
                    print("CHECK FAILED", rows[-1], flush=True)
    print(f"checked {len(rows)} variant/problem pairs: {sum(r['ok'] for r in rows)} ok", flush=True)
    return rows


def time_all(sms):
    rows, reads = [], {}
    for fam in FAMILIES:
        dtype, sd, group, bits = family(fam)
        for n, k in LAYERS:
            wbytes = n * k * bits // 8 + (n * k // 128 * 2 + (n * k // 128 // 2 if fam == "awq" else 0)
                                          if group == 128 else 0)
            copies = max(2, min(8, -(-L2_MARGIN // wbytes)))
            wts = make_weights(fam, n, k, copies, dtype)
            dense_copies = max(2, min(4, -(-L2_MARGIN // (n * k * 2))))
            if fam == "awq":
                dense = [awq_dequantize_float(w[1], w[2], w[3]).to(dtype).t().contiguous() for w in wts[:dense_copies]]
            else:
                dense = [(unpack_weights(w[1], bits, k).to(dtype) * w[2]) for w in wts[:dense_copies]]
            mb = round(wbytes / 1e6, 2)
            if mb not in reads:
                reads[mb] = read_sized(mb)["us"]
            for m in MS:
                x = torch.randn(m, k, dtype=dtype, device="cuda")
                out = torch.empty(m, n, dtype=dtype, device="cuda")
                row = {"fam": fam, "M": m, "N": n, "K": k, "MB": mb, "read": reads[mb]}
                for v in list(VARIANTS[fam]) + list(PROBES.get(fam, {})):
                    call = launcher(fam, v, m, n, k, sms, dtype, sd, group)
                    row[v] = graph_time_us([lambda w=w, c=call: run_variant(c, w, x, out) for w in wts])[0]
                    row["split"] = call.split
                if fam == "awq":
                    cur = [lambda w=w: awq_gemm(x, w[1], w[2], w[3], out=out) for w in wts]
                else:
                    cur = [lambda w=w: quantized_mm(x, w[1], w[2], bits, w[3], out=out) for w in wts]
                row["current"] = graph_time_us(cur)[0]
                row["dense"] = graph_time_us([lambda wd=wd: torch.matmul(x, wd.t(), out=out) for wd in dense])[0]
                rows.append(row)
                print(json.dumps(row), flush=True)
            del wts, dense
            torch.cuda.empty_cache()
    return rows


def print_table(dev, rows):
    print(f"\n{dev}: µs (current = the op's dispatch; dense = torch.matmul on the dense weight; read = bare read)")
    for fam in FAMILIES:
        names = list(VARIANTS[fam]) + list(PROBES.get(fam, {}))
        print(f"{fam:5s} {'M':>3s} {'N':>6s} {'K':>6s} " + " ".join(f"{v[:9]:>9s}" for v in names)
              + f" {'current':>8s} {'dense':>6s} {'read':>5s} {'cur/best':>8s} {'dense/best':>10s}")
        for r in rows:
            if r["fam"] != fam:
                continue
            best = min(r[v] for v in VARIANTS[fam])
            print(f"{'':5s} {r['M']:3d} {r['N']:6d} {r['K']:6d} " + " ".join(f"{r[v]:9.1f}" for v in names)
                  + f" {r['current']:8.1f} {r['dense']:6.1f} {r['read']:5.1f} {r['current'] / best:8.2f}"
                  f" {r['dense'] / best:10.2f}")


def profile(fam, variant, m, n=8192, k=8192):
    sms = _arch.sm_count(0)
    dtype, sd, group, bits = family(fam)
    wt = make_weights(fam, n, k, 1, dtype)[0]
    x = torch.randn(m, k, dtype=dtype, device="cuda")
    out = torch.empty(m, n, dtype=dtype, device="cuda")
    run_variant(launcher(fam, variant, m, n, k, sms, dtype, sd, group), wt, x, out)
    torch.cuda.synchronize()


def main():
    if sys.argv[1:2] == ["profile"]:
        fam, variant, m = sys.argv[2], sys.argv[3], int(sys.argv[4])
        return profile(fam, variant, m, *map(int, sys.argv[5:7]))
    sms = _arch.sm_count(0)
    checks = check_all(sms)
    rows = time_all(sms)
    dev = torch.cuda.get_device_name()
    with open(os.path.join(OUT, "wo_wgmma_small.json"), "w") as f:
        json.dump({"device": dev, "checks": checks, "rows": rows}, f)
    print_table(dev, rows)


if __name__ == "__main__":
    main()
