"""Session 47: where AWQ's decode tile spends a call - a per-warp global-timer timeline of back-to-back calls.

The dispatch's decode tile for a layer (as ``awq_ablate44.py`` builds it) is compiled as a subclass of
``WeightOnlyGemm`` that reads the global nanosecond timer at five points of every warp and writes them, with the
warp's SM, into a timeline tensor passed in the bias slot (the subclass adds no bias):

  entry     before the L2 prefetch (the kernel's first instruction; tiles without a prefetch: = waited)
  waited    after ``griddepcontrol.wait`` (the previous call has completed)
  first     after the warp's first K step's MMAs were issued (its first weights, x and parameters have arrived)
  loop_end  after the K loop
  end       after the epilogue (split-K reduction through shared memory, stores issued)

Outputs are checked against awq_gemm (equal) before timing. CALLS calls run as one CUDA graph over rotating weight
sets (like bench_awq.py); per call, times are ns after the previous call's last warp end: first / median entry,
median / last wait release, then medians of first - waited, loop_end - first, end - loop_end, and the median / last
end; plus the period (last end to last end) and the graph's time per call.

    python benchmarks/experiments/awq_timeline47.py OUT_JSON [--layers 4096x4096,...] [--ms 1,4] [--dtype fp16]
"""

import argparse
import json
import statistics

import torch

import cutlass
import cutlass.cute as cute
from cutlass import Int64, const_expr

from cute_kernels import arch
from cute_kernels.bench import graph_time_us
from cute_kernels.weight_only import awq_gemm, awq_repack, compile as wo_compile
from cute_kernels.weight_only.kernel import WeightOnlyGemm

import awq_ablate44 as A
from awq_ablate44 import weight_sets

SLOTS = ("entry", "waited", "first", "loop_end", "end", "sm")
CALLS = 16


class TimedMixin:
    """Timer reads for a ``WeightOnlyGemm`` (sub)class; ``bias`` is the int64 timeline [CTAs * warps, 8]."""

    def _stamps(self):
        if not hasattr(self, "_st"):
            self._st = cute.make_rmem_tensor((8,), Int64)
            self._st.fill(0)
            self._st[2] = Int64(2**63 - 1)
        return self._st

    def prefetch_rows_l2(self, w, bx, tidx):
        self._stamps()[0] = cute.arch.globaltimer()
        super().prefetch_rows_l2(w, bx, tidx)

    def thread_setup(self, x, w, n0, m0, g, t, n_rows=None):
        st = self._stamps()
        st[1] = cute.arch.globaltimer()
        if const_expr(self.tile.l2_prefetch_mb == 0):
            st[0] = st[1]
        return super().thread_setup(x, w, n0, m0, g, t, n_rows)

    def mma_step(self, x, th, wbuf, buf, acc, step, t):
        super().mma_step(x, th, wbuf, buf, acc, step, t)
        st = self._stamps()
        st[2] = cutlass.min(st[2], cute.arch.globaltimer())  # the first step's (st[2] starts at INT64_MAX)

    def drain(self):
        self._stamps()[3] = cute.arch.globaltimer()

    @cute.jit
    def epilogue(self, acc, out, scale, n0, m0, g, t, lane, wn, wk, bias):
        WeightOnlyGemm.epilogue(self, acc, out, scale, n0, m0, g, t, lane, wn, wk, None)
        st = self._stamps()
        st[4] = cute.arch.globaltimer()
        bx, by, _ = cute.arch.block_idx()
        gx, _, _ = cute.arch.grid_dim()
        warps = self.tile.warps_n * self.tile.warps_k
        row = (bx + gx * by) * warps + wk * self.tile.warps_n + wn
        if lane == 0:
            for s in cutlass.range_constexpr(5):
                bias[row, s] = st[s]
            bias[row, 5] = Int64(cute.arch.smid())


def timed(base):
    return type(f"Timed{base.__name__}", (TimedMixin, base), {})


def build(fmt_key, dtype, tile, promote, gpu_arch=None, base=WeightOnlyGemm):
    """compile._build of ``timed(base)`` with an int64 [rows, 8] timeline in the bias slot."""
    f_tl = cute.runtime.make_fake_tensor(cutlass.Int64, (cute.sym_int32(), 8), stride=(8, 1), assumed_align=8)
    return wo_compile._build(fmt_key, dtype, dtype, dtype, tile, gpu_arch or arch.current_arch(torch.device("cuda")),
                             promote_scales=promote, kernel_cls=timed(base), bias_fake=f_tl)


def summarize(tls):
    """Per call 2..N: phases in ns after the previous call's last warp end; medians over calls."""
    rows = []
    for prev, cur in zip(tls, tls[1:]):
        p_end = int(prev[:, 4].max())
        e, wt, f, le, en = (cur[:, i] for i in range(5))
        rows.append({"entry_first": int(e.min()) - p_end, "entry_median": int(e.median()) - p_end,
                     "waited_median": int(wt.median()) - p_end, "waited_last": int(wt.max()) - p_end,
                     "first_after_wait": int((f - wt).median()), "loop_after_first": int((le - f).median()),
                     "epilogue": int((en - le).median()), "end_median": int(en.median()) - p_end,
                     "end_last": int(en.max()) - p_end})
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}, rows


def main():
    ap = argparse.ArgumentParser()
    A.add_layer_args(ap)
    ap.add_argument("--variants", default="ship")
    args = ap.parse_args()
    dtype = A.torch_dtype(args.dtype)
    sms = arch.sm_count(0)
    results = []
    for layer in args.layers.split(","):
        oc, ic = map(int, layer.split("x"))
        sets = weight_sets(oc, ic, dtype, args.sets_mb)
        kws = [awq_repack.kernel_weights(*s, 128) for s in sets]
        for m in map(int, args.ms.split(",")):
            picked = A.dispatch_decode_tile(m, oc, ic, dtype, kws[0], sms)
            if picked is None:
                continue
            fmt_key, tile, promote = picked
            ctas = -(-oc // tile.rows_per_cta) * -(-m // tile.tokens_per_cta)
            x = torch.randn(m, ic, device="cuda", dtype=dtype)
            ref = awq_gemm(x, *sets[0])
            for v in args.variants.split(","):
                vt = A.variant_tile(v, tile)
                fn = build(fmt_key, dtype, vt, promote, base=A.VARIANTS[v])
                rows = ctas * vt.threads // 32
                out = torch.full((m, oc), float("nan"), device="cuda", dtype=dtype)
                tls = [torch.zeros(rows, 8, dtype=torch.int64, device="cuda") for _ in range(CALLS)]
                fn(x, kws[0].w, out, 1.0, kws[0].scales, kws[0].zeros, 128, tls[0])
                equal = "ablation" if v in A.ABLATIONS else torch.equal(out, ref)
                calls = [lambda i=i: fn(x, kws[i % len(kws)].w, out, 1.0, kws[i % len(kws)].scales,
                                        kws[i % len(kws)].zeros, 128, tls[i]) for i in range(CALLS)]
                per_call = graph_time_us(calls, min_calls=CALLS)[0]
                plain = graph_time_us([lambda s=s: awq_gemm(x, *s) for s in sets], min_calls=CALLS)[0]
                # graph_time_us replays the graph many times; the last replay's stamps are in tls.
                torch.cuda.synchronize()
                used = [t.cpu() for t in tls]
                summ, per = summarize(used)
                periods = [int(b[:, 4].max() - a[:, 4].max()) for a, b in zip(used, used[1:])]
                res = dict(oc=oc, ic=ic, m=m, variant=v, fmt=fmt_key, tile=str(vt), ctas=ctas, equal_to_awq_gemm=equal,
                           graph_us_per_call=per_call, awq_gemm_us=plain,
                           period_median_ns=statistics.median(periods), summary=summ, per_call=per,
                           last_call=used[-1][:, :6].tolist())
                results.append(res)
                print(f"{oc}x{ic} M={m} {v:8s} {fmt_key} eq={equal} graph {per_call:.2f} us (awq_gemm {plain:.2f}) "
                      f"period {res['period_median_ns']} | " + " ".join(f"{k} {v:.0f}" for k, v in summ.items()),
                      flush=True)
        del sets, kws
        awq_repack.clear_cache()
    with open(args.out, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), calls=CALLS, results=results), f)


if __name__ == "__main__":
    main()
