"""Session 38: ``Fp8RowwiseLinear`` (per-token FP8 quantizer kernel + fp8_scaled_mm with the bias in the epilogue)
beside what a torch user runs for the same layer: the bf16 ``F.linear`` it replaces, and dynamic per-token FP8 in
torch (amax / scale / cast, then torch._scaled_mm rowwise, promoted and fast-accum, with its bias argument). Also the
quantizer alone against its torch reference. bf16, bias on; weights (and x) rotated past L2; CUDA-graph medians of 3
interleaved rounds; each path's relative error (Frobenius) against the float layer in float64. One line per shape."""
import json, os, statistics

import torch
import torch.nn.functional as F

from cute_kernels import per_token_quant_fp8
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.fp8 import quantize_fp8_rowwise
from cute_kernels.nn import Fp8RowwiseLinear

BF16 = torch.bfloat16
rows = []


def torch_fp8_quant(x):
    """Dynamic per-token e4m3 in plain torch (what torchao's / a hand-written rowwise recipe does)."""
    scale = x.float().abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448.0
    return (x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


def rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def case(m, n, k):
    copies = max(2, min(12, -(-160 * 2**20 // (n * k))))
    lins, layers, xs = [], [], []
    for i in range(copies):
        lin = torch.nn.Linear(k, n, device="cuda", dtype=BF16)
        lins.append(lin)
        layers.append(Fp8RowwiseLinear.from_linear(lin))
        xs.append(torch.randn(m, k, device="cuda", dtype=BF16))
    ref = F.linear(xs[0].double(), lins[0].weight.double(), lins[0].bias.double())

    def torch_fp8(i, fast):
        a, sa = torch_fp8_quant(xs[i])
        lay = layers[i]
        return torch._scaled_mm(a, lay.weight.t(), sa, lay.weight_scale.view(1, -1), bias=lay.bias,
                                out_dtype=BF16, use_fast_accum=fast)

    variants = {
        "bf16": [lambda i=i: F.linear(xs[i], lins[i].weight, lins[i].bias) for i in range(copies)],
        "ours": [lambda i=i: layers[i](xs[i]) for i in range(copies)],
        "torch_fp8": [lambda i=i: torch_fp8(i, False) for i in range(copies)],
        "torch_fp8_fast": [lambda i=i: torch_fp8(i, True) for i in range(copies)],
        "quant_ours": [lambda i=i: per_token_quant_fp8(xs[i]) for i in range(copies)],
        "quant_torch": [lambda i=i: quantize_fp8_rowwise(xs[i], check_finite=False) for i in range(copies)],
    }
    errs = {}
    for name in list(variants):
        try:
            out = variants[name][0]()
            if not name.startswith("quant"):
                errs[name] = rel(out, ref)
        except RuntimeError as exc:
            print(f"  {name} failed at {m}x{n}x{k}: {str(exc)[:160]}", flush=True)
            del variants[name]
    q, s = per_token_quant_fp8(xs[0])
    rq, rs = quantize_fp8_rowwise(xs[0])
    bit_equal = torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(s, rs)
    t = {kk: [] for kk in variants}
    for _ in range(3):
        for kk, calls in variants.items():
            t[kk].append(graph_time_us(calls)[0])
    med = {kk: statistics.median(v) for kk, v in t.items()}
    row = {"M": m, "N": n, "K": k, "quant_bit_equal": bit_equal, **{f"{kk}_us": v for kk, v in med.items()},
           **{f"{kk}_err": v for kk, v in errs.items()}}
    rows.append(row)
    vs = "  ".join(f"{kk} {med[kk]:7.2f} ({med[kk] / med['ours']:.2f}x)" for kk in med if kk != "ours")
    print(f"M={m:5d} N={n:5d} K={k:5d} ours {med['ours']:7.2f} us  {vs}  bit_equal={bit_equal}  "
          f"err {' / '.join(f'{kk} {v:.1e}' for kk, v in errs.items())}", flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), flush=True)
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
        for m in (1, 16, 128, 1024, 4096):
            case(m, n, k)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "fp8_rowwise_layer38.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
