"""Where the host time of a warm quantized_mm / awq_gemm call goes, session 13.

On an H200 host (session 13, host_overhead.py) a warm quantized_mm call cost 17.5 µs and awq_gemm 22.5 µs against
8.5 µs for int8_scaled_mm with ``out=`` - more than their decode kernels take (5-14 µs at N = K = 4096), so an eager
decode loop would be host-bound. This times the pieces of each warm path with the GPU held busy (host_overhead.host_us):
the call with and without ``out=``, the memo lookup, the output allocation and the compiled TVM-FFI function alone.
``python benchmarks/experiments/wo_host_path.py`` prints µs per piece.
"""
import sys

sys.path[:0] = ["benchmarks"]
import torch

from host_overhead import host_us


def main():
    import importlib

    from cute_kernels import awq_gemm, quantized_mm
    from cute_kernels.formats.bitpack import pack_weights
    from cute_kernels.weight_only import awq_repack

    qmm_mod = importlib.import_module("cute_kernels.weight_only.quantized_mm")  # the package exports the functions
    awq_mod = importlib.import_module("cute_kernels.weight_only.awq")

    dev = "cuda"
    res = {}
    wq = pack_weights(torch.randint(-8, 8, (4096, 4096), device=dev), 4)
    xq = torch.randn(1, 4096, device=dev).bfloat16()
    outq = torch.empty(1, 4096, device=dev, dtype=torch.bfloat16)
    quantized_mm(xq, wq, 0.01, 4)
    sig = next(iter(qmm_mod._plans))
    fn, n, group, _ = qmm_mod._plans[sig]
    res["quantized_mm: call"] = host_us(lambda: quantized_mm(xq, wq, 0.01, 4))
    res["quantized_mm: call, out="] = host_us(lambda: quantized_mm(xq, wq, 0.01, 4, out=outq))
    res["quantized_mm: signature + memo get"] = host_us(lambda: qmm_mod._plans.get(
        (xq.shape, xq.stride(), xq.dtype, xq.device, wq.shape, wq.stride(), wq.dtype, 4, None, None, None, None)))
    res["torch.empty [1, 4096] bf16"] = host_us(lambda: torch.empty((1, n), dtype=torch.bfloat16, device=xq.device))
    dev_obj = xq.device
    res["x.new_empty [1, 4096] bf16"] = host_us(lambda: xq.new_empty((1, n)))
    res["torch.empty, device object reused"] = host_us(lambda: torch.empty((1, n), dtype=torch.bfloat16, device=dev_obj))
    res["quantized_mm: compiled fn alone"] = host_us(lambda: fn(xq, wq, outq, 0.01, None, None, group))
    res["quantized_mm: torch.empty + fn"] = host_us(
        lambda: fn(xq, wq, torch.empty((1, n), dtype=torch.bfloat16, device=xq.device), 0.01, None, None, group))

    qweight = torch.randint(-2**31, 2**31 - 1, (4096, 512), dtype=torch.int32, device=dev)
    qzeros = torch.randint(-2**31, 2**31 - 1, (32, 512), dtype=torch.int32, device=dev)
    scales = (torch.rand(32, 4096, device=dev) * 0.01).half()
    xa = torch.randn(1, 4096, device=dev).half()
    outa = torch.empty(1, 4096, device=dev, dtype=torch.float16)
    awq_gemm(xa, qweight, scales, qzeros)
    key = awq_repack.cache_key(qweight, scales, qzeros)
    afn, agroup = awq_mod._plans[(xa.shape, xa.stride(), xa.dtype, key)]
    kw = awq_repack.cached(key)
    res["awq_gemm: call"] = host_us(lambda: awq_gemm(xa, qweight, scales, qzeros))
    res["awq_gemm: call, out="] = host_us(lambda: awq_gemm(xa, qweight, scales, qzeros, out=outa))
    res["awq_gemm: cache_key"] = host_us(lambda: awq_repack.cache_key(qweight, scales, qzeros))
    res["awq_gemm: memo get + repack get"] = host_us(
        lambda: (awq_mod._plans.get((xa.shape, xa.stride(), xa.dtype, key)), awq_repack.cached(key)))
    res["awq_gemm: compiled fn alone"] = host_us(lambda: afn(xa, kw.w, outa, 1.0, kw.scales, kw.zeros, agroup))
    res["device"] = torch.cuda.get_device_name()
    for k, v in res.items():
        print(f"{k:45s} {v:6.2f} us" if isinstance(v, float) else f"{k:45s} {v}")


if __name__ == "__main__":
    main()
