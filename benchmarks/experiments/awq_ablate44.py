"""Session 44: where does AWQ's decode tile spend its time at a few tokens? Ablations of the repack reader.

Each variant is the dispatch's decode tile (``config.select_tile`` for the layer, the format ``awq.decode_format``
picks, ``config.tile_for_format``) compiled uncached, called directly on the repack. The ablations (nop, nox, noxp,
now) compile a subclass of ``WeightOnlyGemm`` that replaces one kind of load with constants, so the kernel does the
same arithmetic without those loads (wrong results by design); they need fewer registers, so they are capped at
the shipped kernel's 2 CTAs per SM. The other variants are checked against awq_gemm (equal, or within 1e-3 of
max|ref| where the summation order moves) before timing:

  ship      the shipped kernel, compiled uncached (its time must match awq_gemm's: printed side by side)
  shipcap   the same with the cap
  nop       no scale / zero-point loads (constant decode contexts)
  nox       no activation loads (constant x words)
  noxp      neither: only the weight stream is loaded
  now       no weight loads (constant weight words): x and the parameters only
  noload    (session 50) none of the three: the arithmetic, the launch and the epilogue alone
  accC      the dispatch's tile with TileShape.acc_chains = C (C accumulator chains; the sum order moves: checked to
            1e-3 of max|ref|); since session 44 the dispatch gives AWQ's one-warp-across tiles 2 (acc1 = before)
  olddiv    (session 50) the group index by a division per K step and no CTA cap: AWQ's decode tiles before
            kernel.group_of and config.DECODE_CTA_CAP_GROUPED_FORMATS; olddivcap the same with the cap
  nozf      x loads without zero-filling predicated-off lanes (exact at these K: checked); nozf_acc2 with acc2
  p1line    (session 45) the parameter loads of all 16 rows of a tile read its first row (one L1 line per warp
            load instead of 8; an ablation)
  pfMB      (session 45) the dispatch's tile with l2_prefetch_mb = MB (the weight rows' L2 prefetch budget)
  wn2k8     (session 46) the dispatch's tile with 2 warps side by side and 8 along K (512 threads)
  inplace_probe, xcontig_probe  (session 47, ablations) awq_fma's decode with two shifts per word instead of four; the
            x loads of a quad side by side (the instruction count / the x access of two layouts not built or kept)
  o:F=V+..  (session 46) the dispatch's tile with TileShape fields F set to the integers V (e.g. o:stages=3+
            preload_weights=1+l2_prefetch_mb=0); since session 52 ``fmt=KEY`` among them runs that format (e.g.
            o:fmt=awq_zmma+fields_in_place=1+acc_chains=1)
  rowmajor  (session 45) the dispatch's tile on the repack before session 45: row-major (kw.row_major()), without
            fragment_order, the L2 prefetch at its old 4 MB where the tile has one; rowmajor_pfMB with MB

Timed like bench_awq.py (CUDA graphs of >= 16 calls over rotating weight sets, medians of interleaved rounds).

    python benchmarks/experiments/awq_ablate44.py OUT_JSON [--layers 4096x4096,...] [--ms 1,4] [--variants ...]
        [--dtype fp16|bf16]

Session 44's other variants (L1/L2 prefetches, a per-thread cp.async ring for x and the parameters, operands two
steps ahead, the CTA's x and parameters staged in shared memory) were slower and are in the data archive
(session44/dropped/, with their patches); session 45's (the awq_codes format, the parameters' L2 prefetch) in
session45/dropped/; session 46's (the parameters inline in the weight stream) in session46/dropped/.
"""

import argparse
import json
import statistics
from dataclasses import replace

import torch

import cutlass
from cutlass import Float32, Int64, Uint32, const_expr

from cute_kernels import arch
from cute_kernels.bench import graph_time_us
from cute_kernels.weight_only import awq_gemm, awq_repack, compile as wo_compile, config, formats, ptx
from cute_kernels.weight_only.awq import decode_format, group_params
from cute_kernels.weight_only.kernel import WeightOnlyGemm, group_of
from cute_kernels.weight_only.quantized_mm import use_promoted_scales

CALLS = 16


def ablated(no_x=False, no_params=False, no_weights=False, one_line_params=False):
    class Ablated(WeightOnlyGemm):
        def load_weights(self, th, buf, step, t, row_bytes, coherent=False):
            if const_expr(no_weights):
                for i in range(self.tile.row_slots * 4):
                    buf[i] = Uint32(0x19A2B3C4) ^ Uint32(step * 0x01010101 + i)
            else:
                super().load_weights(th, buf, step, t, row_bytes, coherent)

        # (since session 47 the two halves of load_step_operands, which the preload calls apart)
        def load_step_x(self, x, th, buf, step, t):
            if const_expr(no_x):
                run = self.act.words_per_run(self.fmt.values_per_vector)
                for i in range(self.tile.mt):
                    for v in range(run):
                        buf["x"][i * run + v] = Uint32(0x3C003C00) ^ Uint32(step + v % 4)
            else:
                super().load_step_x(x, th, buf, step, t)

        def load_step_params(self, th, buf, step, t, group_scales, zeros, group):
            fmt, tile = self.fmt, self.tile
            vpv = fmt.values_per_vector
            k_chunk = step * (4 * vpv) + t * vpv
            if const_expr(self.scale_dtype is not None):
                for blk in range(self.blocks):
                    gi = cutlass.min(group_of(k_chunk + 32 * blk, group), group_scales.shape[1] - 1)
                    for r in range(tile.row_slots):
                        row = th["rows"][r]
                        if const_expr(no_params):
                            buf["s"][blk * tile.row_slots + r] = Float32(0.01) + Float32(gi) * Float32(1e-6)
                            if const_expr(fmt.has_zeros):
                                buf["z"][blk * tile.row_slots + r] = Uint32(8)
                        else:
                            if const_expr(one_line_params):  # every row reads its tile's first row: one L1 line
                                row = row // 16 * 16
                            buf["s"][blk * tile.row_slots + r] = group_scales[row, gi].to(Float32)
                            if const_expr(fmt.has_zeros):
                                buf["z"][blk * tile.row_slots + r] = Uint32(zeros[row, gi])

    return Ablated


class OldDivision(WeightOnlyGemm):
    """(session 50) the group index by an integer division per K step, as before kernel.group_of: the group size is
    recovered from the multiplier once (exact for power-of-two groups) and divided by at every step."""

    def load_step_params(self, th, buf, step, t, group_scales, zeros, group_mul):
        fmt, tile = self.fmt, self.tile
        vpv = fmt.values_per_vector
        k_chunk = step * (4 * vpv) + t * vpv
        group = 32 * ((1 << 30) // group_mul)
        if const_expr(self.scale_dtype is not None):
            for blk in range(self.blocks):
                gi = cutlass.min((k_chunk + 32 * blk) // group, group_scales.shape[1] - 1)
                for r in range(tile.row_slots):
                    row = th["rows"][r]
                    buf["s"][blk * tile.row_slots + r] = group_scales[row, gi].to(Float32)
                    if const_expr(fmt.has_zeros):
                        buf["z"][blk * tile.row_slots + r] = Uint32(zeros[row, gi])


class NoZeroFill(WeightOnlyGemm):
    """x runs loaded without zeroing the registers of predicated-off loads: exact where K is a whole number of K
    steps (no run past K) - dead-token lanes keep stale registers, which reach only columns that are never stored."""

    def x_run(self, x, th, step, t, i, first_byte, nwords):
        vpv, bpv = self.fmt.values_per_vector, self.act.bytes_per_value
        pred = (step * (4 * vpv) + t * vpv < x.shape[1]) & th["x_live"][i]
        x_off = Int64(step * (4 * vpv * bpv))
        return ptx.ld_global(th["x_rows"][i] + x_off, pred, nwords, streaming=False, zero_fill=False,
                             offset=first_byte)


class XSameStep(WeightOnlyGemm):
    """(session 54, an ablation) every K step loads the x run of the warp's K step 0 (``xsame``: L1-resident after
    its first touch; wrong results by design) or each x load bypasses L1 allocation (``xnoL1``: exact) - whether the
    x loads cost through L2 misses or through the L1 path itself."""

    same_step = True

    def x_run(self, x, th, step, t, i, first_byte, nwords):
        vpv, bpv = self.fmt.values_per_vector, self.act.bytes_per_value
        if const_expr(self.same_step):
            step = step % self.tile.warps_k
        pred = (step * (4 * vpv) + t * vpv < x.shape[1]) & th["x_live"][i]
        x_off = Int64(step * (4 * vpv * bpv))
        return ptx.ld_global(th["x_rows"][i] + x_off, pred, nwords, streaming=not self.same_step, offset=first_byte)


class XNoL1(XSameStep):
    same_step = False


class ParamWords(WeightOnlyGemm):
    """(session 54, a prototype: awq_zmma, fp16, fields in place) the group parameters as one precomputed 32-bit word
    per (row, group) - low half -(1024 + z) (fp16: the j = 0 correction), high half the fp16 scale - instead of the
    scale and the zero point loaded apart and turned into the corrections per K step: two loads a step instead of
    four, and per row a prmt, an add and a cvt instead of shifts, splats and a cvt. The host passes the words
    ([N, G] int32, ``param_words``) in the scales' argument, as an fp16 [N, 2G] view."""

    def load_step_params(self, th, buf, step, t, group_scales, zeros, group_mul):
        vpv = self.fmt.values_per_vector
        k_chunk = step * (4 * vpv) + t * vpv
        gi = cutlass.min(group_of(k_chunk, group_mul), group_scales.shape[1] // 2 - 1)
        for r in range(self.tile.row_slots):
            row = th["rows"][r]
            addr = group_scales.iterator.toint() + (Int64(row) * group_scales.stride[0] + Int64(2 * gi)) * 2
            word = ptx.ld_global(addr, True, 1, streaming=False)[0]
            buf["z"][r] = word
            buf["s"][r] = ptx.f16x2_to_f32(word)[1]

    def group_contexts(self, buf, blk):
        ct = self.act.compute
        out = []
        for r in range(self.tile.row_slots):
            neg0 = ptx.prmt(buf["z"][r], buf["z"][r], 0x1010)  # -(M_0 + z) in both halves
            neg4 = ptx.fma_x2_cc(ct.x2, neg0, ct.pair(ct.one), ct.pair(ct.encode(960.0)))  # -(M_4 + z)
            out.append(({0: neg0, 4: neg4}, None))
        return out


def param_words(kw):
    """ParamWords' [N, G] int32 words of a repack, as the fp16 [N, 2G] view the kernel's scale argument takes."""
    lo = (kw.zeros.to(torch.int32) | 0xE400)
    hi = kw.scales.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
    return (lo | (hi << 16)).contiguous().view(torch.float16)


class InPlaceProbe(WeightOnlyGemm):
    """(session 47, an ablation) awq_fma's decode with two shifts per word instead of four: pairs 0 / 2 masked at
    mantissa bit 2, pairs 1 / 3 at bit 6, all multiplied by the bit-6 scale (wrong values for half the pairs by
    design) - the instruction count of an in-place subnormal decode, to see what it would be worth."""

    def __init__(self, fmt, *args, **kwargs):
        super().__init__(fmt, *args, **kwargs)
        if fmt.name == "awq_fma":
            self.fmt = _InPlaceFmaProbe()


class XContiguousProbe(WeightOnlyGemm):
    """(session 47, an ablation) the x run loads of a K step with lanes t = 0..3 side by side (16 t + 64 v bytes)
    instead of each lane's 64 contiguous bytes (64 t + 16 v): half the L1 lines per load instruction, as a repack
    whose K steps put the threads' 8-value blocks interleaved would give; the weights stay as they are (wrong
    values). The real layout (session47/dropped/k_interleave.patch in the data archive) did not keep the gain."""

    def thread_setup(self, x, w, n0, m0, g, t, n_rows=None):
        th = super().thread_setup(x, w, n0, m0, g, t, n_rows)
        shift = Int64(t * (self.fmt.values_per_vector - 8) * self.act.bytes_per_value)  # 64 t -> 16 t
        th["x_rows"] = [r - shift for r in th["x_rows"]]
        return th

    def x_run(self, x, th, step, t, i, first_byte, nwords):
        return super().x_run(x, th, step, t, i, first_byte * 4, nwords)


class _InPlaceFmaProbe(formats.AwqInt4OneFma):
    def field_bits(self, ct, in_place):
        return [2, 6]


VARIANTS = {"ship": WeightOnlyGemm, "shipcap": WeightOnlyGemm, "nop": ablated(no_params=True),
            "nox": ablated(no_x=True), "noxp": ablated(no_x=True, no_params=True), "now": ablated(no_weights=True),
            "noload": ablated(no_x=True, no_params=True, no_weights=True),
            "acc1": WeightOnlyGemm, "acc2": WeightOnlyGemm, "acc4": WeightOnlyGemm, "nozf": NoZeroFill,
            "nozf_acc2": NoZeroFill, "olddiv": OldDivision, "olddivcap": OldDivision}
TILE_OVERRIDES = {"acc1": {"acc_chains": 1}, "acc2": {"acc_chains": 2}, "acc4": {"acc_chains": 4},
                  "nozf_acc2": {"acc_chains": 2}}
VARIANTS.update(xsame=XSameStep, xnoL1=XNoL1, pwords=ParamWords)
VARIANTS.update(p1line=ablated(one_line_params=True), rowmajor=WeightOnlyGemm, inplace_probe=InPlaceProbe,
                xcontig_probe=XContiguousProbe)
for _mb in (0, 1, 2, 3, 4, 8):
    VARIANTS[f"pf{_mb}"] = VARIANTS[f"rowmajor_pf{_mb}"] = WeightOnlyGemm
    TILE_OVERRIDES[f"pf{_mb}"] = {"l2_prefetch_mb": _mb}
    TILE_OVERRIDES[f"rowmajor_pf{_mb}"] = {"l2_prefetch_mb": _mb, "fragment_order": False}
# Session 46: the CTA's two 16-row tiles side by side, 8 warps along K each (512 threads, one CTA per SM by registers):
# the two warps of a K step read the same x run at the same time.
VARIANTS["wn2k8"] = WeightOnlyGemm
TILE_OVERRIDES["wn2k8"] = {"warps_n": 2, "warps_k": 8}
# run on the dispatch's tile itself (the others not in TILE_OVERRIDES: capped at 2 CTAs)
EXACT = ("ship", "nozf", "xnoL1", "pwords")
TILE_OVERRIDES.update(olddiv={"max_ctas_per_sm": 0}, olddivcap={"max_ctas_per_sm": 2})  # olddiv: as shipped before
# wrong results by design: not checked
ABLATIONS = ("xsame", "nop", "nox", "noxp", "now", "noload", "p1line", "inplace_probe", "xcontig_probe")


def build(variant, fmt_key, dtype, tile, promote):
    return wo_compile._build(fmt_key, dtype, dtype, dtype, tile, arch.current_arch(torch.device("cuda")), "",
                             promote, False, kernel_cls=VARIANTS[variant])


def _set(ic, oc, dtype):
    return (torch.randint(-2**31, 2**31 - 1, (ic, oc // 8), dtype=torch.int32, device="cuda"),
            (torch.rand(ic // 128, oc, device="cuda") * 0.01 + 0.001).to(dtype),
            torch.randint(-2**31, 2**31 - 1, (ic // 128, oc // 8), dtype=torch.int32, device="cuda"))


def weight_sets(oc, ic, dtype, sets_mb):
    """Random AWQ (qweight, scales, qzeros) sets of one layer, enough to rotate ``sets_mb`` MB of weights (2-16)."""
    n = min(16, max(2, -(-int(sets_mb * 2**20) // (ic * oc // 2))))
    return [_set(ic, oc, dtype) for _ in range(n)]


def write_rows(path, rows):
    with open(path, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


def _reference64(x, kw):
    """float64 x @ ((u - z) s)^T from the repack (K-packed nibbles, low = even k; scales / zeros [N, groups])."""
    w = kw.row_major()  # uint8 [OC, IC / 2] K-packed
    u = torch.stack([w & 0xF, w >> 4], dim=-1).reshape(w.shape[0], -1)[:, :x.shape[1]].double()
    g = torch.arange(x.shape[1], device=x.device) // kw.group
    w = (u - kw.zeros.double()[:, g]) * kw.scales.double()[:, g]
    return x.double() @ w.t()


def add_layer_args(ap, layers="4096x4096,4096x14336", ms="1,4"):
    """The arguments the AWQ experiments share (output path, layers, token counts, weight rotation, dtype)."""
    ap.add_argument("out")
    ap.add_argument("--layers", default=layers)
    ap.add_argument("--ms", default=ms)
    ap.add_argument("--sets-mb", type=float, default=240.0)
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))


def torch_dtype(name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def variant_tile(v, tile):
    """The tile variant ``v`` runs: the dispatch's tile with the variant's TileShape overrides ("o:field=value+...":
    those fields set to the integers, booleans as 0 / 1), the exact variants on the tile itself, the others (the
    ablations, which need fewer registers) capped at the shipped kernel's 2 CTAs per SM."""
    if v.startswith("o:"):
        VARIANTS[v] = ParamWords if uses_param_words(v) else WeightOnlyGemm  # (session 54: pw=1)
        TILE_OVERRIDES[v] = {f: int(val) if f != "x_ahead" else bool(int(val))
                             for f, val in (kv.split("=") for kv in v[2:].split("+")) if f not in ("fmt", "pw")}
    if v in TILE_OVERRIDES:
        return replace(tile, **TILE_OVERRIDES[v])
    return tile if v in EXACT else replace(tile, max_ctas_per_sm=2)


def uses_param_words(v):
    """(session 54) whether variant ``v`` runs ParamWords: ``pwords``, or an "o:" variant with ``pw=1``."""
    return v == "pwords" or (v.startswith("o:") and "pw=1" in v[2:].split("+"))


def variant_format(v, fmt_key):
    """(session 52) the format a variant runs: ``fmt=KEY`` among an "o:" variant's fields, else ``fmt_key``."""
    for kv in (v[2:].split("+") if v.startswith("o:") else ()):
        if kv.startswith("fmt="):
            return kv[4:]
    return fmt_key


def dispatch_decode_tile(m, oc, ic, dtype, kw, sms):
    """(format key, tile, promoted scales) of awq_gemm's decode tile for the layer, as awq_gemm runs it on the repack
    (the decode path forced: None where the dispatch has no decode tile)."""
    path, tile = config.select_tile(4, m, oc, sms, None, scaled=True, awq=True, k=ic, wgmma=False)
    if path != "decode":
        return None
    tile = config.awq_repack_tile(tile)
    fmt_key = decode_format(path, dtype, kw, tile)
    tile = config.tile_for_format(fmt_key, tile, ic, oc, sms)
    return fmt_key, tile, use_promoted_scales(fmt_key, True, 128, dtype, tile)


def main():
    ap = argparse.ArgumentParser()
    add_layer_args(ap)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default="ship,shipcap,nop,nox,noxp,now")
    ap.add_argument("--base-m", type=int, default=None,
                    help="(session 54) start every variant from the decode tile the dispatch picks at this many tokens "
                    "(e.g. 1: the one-token tile run at 16 tokens)")
    ap.add_argument("--fmt", default=None, help="(session 51) run the variants in this format (awq / awq_fma) instead "
                    "of the dispatch's; promoted scales per variant tile as quantized_mm.use_promoted_scales says")
    args = ap.parse_args()
    variants = args.variants.split(",")
    dtype = torch_dtype(args.dtype)
    sms = arch.sm_count(0)
    rows = []
    for layer in args.layers.split(","):
        oc, ic = map(int, layer.split("x"))
        sets = weight_sets(oc, ic, dtype, args.sets_mb)
        kws = [awq_repack.kernel_weights(*s, 128) for s in sets]
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, ic, device="cuda", dtype=dtype)
            picked = dispatch_decode_tile(args.base_m or m, oc, ic, dtype, kws[0], sms)
            if picked is None:
                continue
            fmt_key, tile, promote = picked
            if args.fmt:
                fmt_key = args.fmt
            old_pf = 4 if tile.l2_prefetch_mb else 0
            TILE_OVERRIDES["rowmajor"] = {"fragment_order": False, "l2_prefetch_mb": old_pf}
            fns, tiles = {}, {}
            for v in variants:
                fv = variant_format(v, fmt_key)
                tv = tiles[v] = variant_tile(v, tile)
                fns[v] = build(v, fv, dtype, tv, use_promoted_scales(fv, True, 128, dtype, tv)
                               if args.fmt or fv != fmt_key else promote)
            rowm = {id(kw): kw.row_major() for kw in kws} if any("rowmajor" in v for v in variants) else {}

            def wt(v, kw):
                return rowm[id(kw)] if "rowmajor" in v else kw.w

            pw = {id(kw): param_words(kw) for kw in kws} if any(map(uses_param_words, variants)) else {}

            def params(v, kw):
                """The kernel's (scales, zeros) arguments: the prototype's words (the kernel's argument checks tie
                the zeros' shape to the scales'), else as awq_gemm passes them for the variant's tile (session 55:
                a tile with the shipped TileShape.param_words takes kw.param_words())."""
                if uses_param_words(v):
                    return pw[id(kw)], pw[id(kw)].view(torch.uint8)[:, :pw[id(kw)].shape[1]]
                return group_params(kw, tiles[v].param_words)

            ref = awq_gemm(x, *sets[0])
            ref64 = _reference64(x, kws[0])
            ok, err64 = {}, {}
            for v in variants:
                if v not in ABLATIONS:  # equal to awq_gemm (or, with acc chains, within 1e-3 of max|ref|)
                    out = torch.full((m, oc), float("nan"), device="cuda", dtype=dtype)
                    fns[v](x, wt(v, kws[0]), out, 1.0, *params(v, kws[0]), 128, None)
                    err = ((out.double() - ref.double()).abs().max() / ref.double().abs().max()).item()
                    err64[v] = f"{((out.double() - ref64).abs().max() / ref64.abs().max()).item():.1e}"
                    ok[v] = "equal" if torch.equal(out, ref) else f"{err:.1e}" if err < 1e-3 else f"WRONG {err:.1e}"
            t = {v: [] for v in variants + ["awq_gemm"]}
            for _ in range(args.rounds):
                for v in variants:
                    o = torch.empty(m, oc, device="cuda", dtype=dtype)
                    t[v].append(graph_time_us([lambda f=fns[v], wv=wt(v, kw), p=params(v, kw): f(x, wv, o, 1.0, *p,
                                                                                            128, None)
                                               for kw in kws],
                                              min_calls=CALLS)[0])
                t["awq_gemm"].append(graph_time_us([lambda s=s: awq_gemm(x, *s) for s in sets], min_calls=CALLS)[0])
            med = {k: statistics.median(v) for k, v in t.items()}
            err64["awq_gemm"] = f"{((ref.double() - ref64).abs().max() / ref64.abs().max()).item():.1e}"
            rows.append(dict(oc=oc, ic=ic, m=m, base_m=args.base_m, fmt=fmt_key, tile=str(tile), ship_equal=ok,
                             err_vs_float64=err64, rounds=t, median=med))
            print(f"{oc}x{ic} M={m} {fmt_key} equal:{ok} float64 err:{err64} " +
                  "  ".join(f"{k} {v:.2f}" for k, v in med.items()), flush=True)
        del sets, kws
        awq_repack.clear_cache()
    write_rows(args.out, rows)


if __name__ == "__main__":
    main()
