"""M = 9..16 decode: token-major grids (one token tile per CTA, L2 serves the second read) vs the two-token-tile plan."""
import sys, json, os, dataclasses
sys.path.insert(0, "benchmarks")
import torch
from bench_weight_only import n_sets, _check
from bench_awq import _awq_set, _check as _check_awq
from cute_kernels.bench import graph_time_us
from cute_kernels.weight_only import quantized_mm, awq_gemm
from cute_kernels.weight_only.config import decode_tile
R = dataclasses.replace
res = []
def variants(f, m, n):
    v = [("plan", decode_tile(f, m, n, 132))]
    for ring in (False, True):
        for xa in (False, True):
            v.append((f"tm r{int(ring)}x{int(xa)}", decode_tile(f, m, n, 132, ring=ring, x_ahead=xa, token_major=True)))
    v.append(("tm m8plan", R(decode_tile(f, 8, n, 132), token_major=True)))
    return v
def run(label, ref_t, calls, check, vs):
    line, best = f"{label} ref {ref_t:6.2f} |", None
    for name, tl in vs:
        try:
            err = check(tl); t, _ = graph_time_us(calls(tl))
        except Exception as e:
            line += f" {name} FAIL({type(e).__name__}: {str(e)[:80]})"; continue
        res.append(dict(label=label, variant=name, tile=tl.key, us=t, ref=ref_t, err=err))
        line += f" {name} {t:6.2f}" + ("" if err == err else "!ERR")
        if err == err and (best is None or t < best[1]): best = (name, t)
    print(line, f"| best {best[0]} {best[1]:.2f} = {ref_t/best[1]:.2f}x", flush=True)
N = K = 8192
bf = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
for bits in (8, 4, 2, 1):
    ws = [torch.randint(0, 256, (N, K * bits // 8), dtype=torch.uint8, device="cuda") for _ in range(n_sets(N * K * bits // 8))]
    for m in ((12, 16) if bits == 4 else (16,)):
        x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
        tb, _ = graph_time_us([lambda w=w: torch.matmul(x, w.t()) for w in bf])
        run(f"bits={bits} M={m}", tb, lambda tl: [lambda w=w: quantized_mm(x, w, 0.01, bits, tile=tl, path="decode") for w in ws],
            lambda tl: _check(quantized_mm(x, ws[0], 0.01, bits, tile=tl, path="decode"), x, ws[0], 0.01, bits), variants(bits, m, N))
    ws = None  # free now (closures above still name them)
for oc, ic in ((8192, 8192), (4096, 14336)):
    s_sets = [_awq_set(ic, oc, torch.float16) for _ in range(4)]
    dense = [torch.randn(ic, oc, device="cuda", dtype=torch.float16) for _ in range(2)]
    for m in ((12, 16) if oc == 8192 else (16,)):
        x = torch.randn(m, ic, device="cuda", dtype=torch.float16)
        tb, _ = graph_time_us([lambda w=w: torch.matmul(x, w) for w in dense])
        run(f"awq {oc}x{ic} M={m}", tb, lambda tl: [lambda s=s: awq_gemm(x, *s, tile=tl) for s in s_sets],
            lambda tl: _check_awq(awq_gemm(x, *s_sets[0], tile=tl), x, *s_sets[0]), variants("awq", m, oc))
    s_sets = dense = None  # free now (closures above still name them)
json.dump(res, open(os.path.join(os.environ.get("OUT", "."), "tm.json"), "w"), indent=1)
