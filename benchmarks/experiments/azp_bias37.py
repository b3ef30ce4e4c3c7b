"""Session 37: what the new epilogue operands cost. CUDA-graph medians of 3 interleaved rounds, weights rotated past
L2, µs; every variant checked against float64 on a corner first. Prints one line per layer and token count.

* int8_scaled_mm with asymmetric activations: plain (symmetric) / zero points per token / per tensor (in the
  epilogue, int32) / plain + the correction as torch ops (what a caller without azp_adj would run).
* fp8_blockwise_scaled_mm with a bias: plain / bias in the epilogue / plain + a torch add.
* Int8Linear symmetric / asymmetric (quantizer + GEMM), layer calls.
"""
import json, os, statistics, sys

import torch

sys.path[:0] = ["benchmarks"]
from bench_weight_only import n_sets  # noqa: E402
from cute_kernels import fp8_blockwise_scaled_mm, int8_scaled_mm  # noqa: E402
from cute_kernels.bench import graph_time_us  # noqa: E402
from cute_kernels.formats.fp8 import quantize_fp8_blockwise, quantize_fp8_per_token_group  # noqa: E402
from cute_kernels.formats.scale_layouts import to_tma_aligned_mn_major  # noqa: E402
from cute_kernels.reference import fp8_blockwise_scaled_mm_ref, int8_scaled_mm_ref  # noqa: E402

rows = []


def timed(variants: dict, label: str):
    for calls in variants.values():  # compile + warm outside the timing
        calls[0]()
    t = {k: [] for k in variants}
    for _ in range(3):
        for k, calls in variants.items():
            t[k].append(graph_time_us(calls)[0])
    med = {k: statistics.median(v) for k, v in t.items()}
    rows.append({"case": label, **med})
    print(f"{label:28s} " + "  ".join(f"{k} {v:7.2f}" for k, v in med.items()), flush=True)


def int8_azp():
    for (n, k), ms in INT8_CASES.items():
        sets = []
        for _ in range(n_sets(n * k, 16)):
            w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
            sets.append((w.t(), torch.rand(n, device="cuda") * 0.01, w.sum(1, dtype=torch.int32)))
        bias = torch.randn(n, device="cuda").bfloat16()
        for m in ms:
            a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
            sa = torch.rand(m, device="cuda") * 0.01
            azp = torch.randint(-128, 128, (m,), dtype=torch.int32, device="cuda")
            b, sb, adj = sets[0]
            out = int8_scaled_mm(a, b, sa, sb, bias, azp_adj=adj, azp=azp)
            ref = int8_scaled_mm_ref(a[:8].cpu(), b[:, :256].cpu(), sa[:8].cpu(), sb[:256].cpu(), bias[:256].cpu(),
                                     adj[:256].cpu(), azp[:8].cpu())
            err = (out[:8, :256].double().cpu() - ref).abs()
            assert (err <= 2 ** -7 * ref.abs() + 1e-2).all(), err.max()

            def torch_corrected(b, sb, adj):
                o = int8_scaled_mm(a, b, sa, sb, None, out_dtype=torch.float32)
                o.sub_((sa * azp)[:, None] * (sb * adj)[None, :])
                return o.add_(bias).to(torch.bfloat16)

            timed({"plain": [lambda b=b, sb=sb: int8_scaled_mm(a, b, sa, sb, bias) for b, sb, _ in sets],
                   "azp token": [lambda b=b, sb=sb, adj=adj: int8_scaled_mm(a, b, sa, sb, bias, azp_adj=adj, azp=azp)
                                 for b, sb, adj in sets],
                   "azp tensor": [lambda b=b, sb=sb, adj=adj: int8_scaled_mm(a, b, sa, sb, bias, azp_adj=adj)
                                  for b, sb, adj in sets],
                   "torch correction": [lambda b=b, sb=sb, adj=adj: torch_corrected(b, sb, adj)
                                        for b, sb, adj in sets]},
                  f"int8 {n}x{k} M={m}")


def fp8_bias():
    for (n, k), ms in FP8_CASES.items():
        sets = [quantize_fp8_blockwise(torch.randn(n, k, device="cuda"), 128) for _ in range(n_sets(n * k, 16))]
        bias = torch.randn(n, device="cuda").bfloat16()
        for m in ms:
            a, sa = quantize_fp8_per_token_group(torch.randn(m, k, device="cuda"), 128)
            sa = to_tma_aligned_mn_major(sa)
            b, sb = sets[0]
            out = fp8_blockwise_scaled_mm(a, b, sa, sb, bias=bias)
            ref = fp8_blockwise_scaled_mm_ref(a[:8].cpu(), b[:256].cpu(), sa[:8].cpu(), sb[:2].cpu(),
                                              bias=bias[:256].cpu())
            err = (out[:8, :256].double().cpu() - ref).abs()
            assert (err <= 2e-2 * ref.abs() + 1e-2 * ref.pow(2).mean().sqrt()).all(), err.max()
            timed({"plain": [lambda b=b, sb=sb: fp8_blockwise_scaled_mm(a, b, sa, sb) for b, sb in sets],
                   "bias fused": [lambda b=b, sb=sb: fp8_blockwise_scaled_mm(a, b, sa, sb, bias=bias)
                                  for b, sb in sets],
                   "plain + add": [lambda b=b, sb=sb: fp8_blockwise_scaled_mm(a, b, sa, sb).add_(bias)
                                   for b, sb in sets]},
                  f"fp8 {n}x{k} M={m}")


def int8_layers():
    from cute_kernels.nn import Int8Linear

    for n, k in ((4096, 4096),):
        lin = torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16)
        layers = {"symmetric": Int8Linear.from_linear(lin)}
        try:
            layers["asymmetric"] = Int8Linear.from_linear(lin, activations="asymmetric")
        except TypeError as exc:
            print("no asymmetric Int8Linear:", exc)
        for m in (1, 16, 256, 4096):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) + 0.5  # activations with an offset
            ref = x.double() @ lin.weight.double().t() + lin.bias.double()
            for name, layer in layers.items():
                with torch.no_grad():
                    y = layer(x)
                rel = ((y.double() - ref).norm() / ref.norm()).item()
                print(f"  Int8Linear {name} M={m}: relative error vs float {rel:.4f}")
            with torch.no_grad():
                timed({name: [lambda layer=layer: layer(x)] for name, layer in layers.items()},
                      f"Int8Linear {n}x{k} M={m}")


def no_prefetch():
    """The epilogue as before session 37's prefetch: only a full-matrix operand's loads issued a sub-tile ahead, the
    vectors loaded in place (run with CUTE_KERNELS_DISK_CACHE=0: the compile cache does not key on this)."""
    from cute_kernels.epilogues import Matrix, tree

    tree.EpilogueTree.fetch = lambda self, ctx: {n.fetch_key: n.load(ctx) for n in self.root.walk()
                                                 if isinstance(n, Matrix)}
    print("epilogue vector prefetch off", flush=True)


def ab():
    """The prefetch A/B's cases: a few int8 (with and without zero points) and FP8 (with and without a bias)."""
    global INT8_CASES, FP8_CASES
    INT8_CASES, FP8_CASES = {(4096, 4096): (1, 128, 4096), (14336, 4096): (4096,)}, {(7168, 2048): (1, 128, 1024, 4096),
                                                                                  (4096, 7168): (4096,)}


INT8_CASES = {(n, k): (1, 16, 128, 1024, 4096) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))}
FP8_CASES = {(n, k): (1, 64, 128, 1024, 4096) for n, k in ((7168, 2048), (4096, 7168), (2112, 7168))}

if __name__ == "__main__":
    print(torch.cuda.get_device_name(), flush=True)
    which = sys.argv[1:] or ["int8_azp", "fp8_bias", "int8_layers"]
    for name in which:
        globals()[name]()
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"azp_bias37{'_'.join([''] + sys.argv[1:])}.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
