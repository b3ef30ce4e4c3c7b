"""What the linear layers (cute_kernels/nn.py) cost beyond their op, session 36.

AwqLinear / QuantizedLinear call their op on x as it is; Int8Linear and Fp8Linear first quantize x
(``per_token_quant_int8`` / ``per_token_group_quant_fp8``; the session's first run used the torch references). This
times each layer's forward against its op on pre-quantized operands, first with the quantizer kernel launched in
plain stream order, then with programmatic dependent launch (the default): fp16 / bf16 x at 1 / 16 / 256 tokens on
4096 x 4096 (out x in), CUDA-graph medians over 4 layer copies (weights rotated), and prints the table;
$OUT/layer_overhead36_pdl{0,1}.json have the numbers.
"""
import json
import os
import statistics

import torch
from torch import nn

from cute_kernels import awq_linear, fp8_blockwise_scaled_mm, int8_scaled_mm, quantized_mm
from cute_kernels.bench import graph_time_us
from cute_kernels.formats.fp8 import quantize_fp8_per_token_group
from cute_kernels.formats.int8 import quantize_int8_rowwise
from cute_kernels.formats.scale_layouts import to_tma_aligned_mn_major
from cute_kernels.nn import AwqLinear, Fp8Linear, Int8Linear, QuantizedLinear

K = N = 4096
COPIES = 4


def op_call(layer, x):
    """The layer's op alone on operands prepared outside the timed call."""
    x2 = x.reshape(-1, K)
    if isinstance(layer, AwqLinear):
        return lambda: awq_linear(x2, layer.qweight, layer.scales, layer.qzeros, layer.bias)
    if isinstance(layer, QuantizedLinear):
        return lambda: quantized_mm(x2, layer.w_packed, layer.scale, layer.bits, layer.group_scales)
    if isinstance(layer, Int8Linear):
        q, s = quantize_int8_rowwise(x2)
        return lambda: int8_scaled_mm(q, layer.weight.t(), s, layer.weight_scale, layer.bias, x.dtype)
    a, a_s = quantize_fp8_per_token_group(x2, 128)
    a_s = to_tma_aligned_mn_major(a_s)
    return lambda: fp8_blockwise_scaled_mm(a, layer.weight, a_s, layer.weight_scale_inv, x.dtype)


def main():
    import cute_kernels.quantize as quantize

    for pdl in (False, True):  # the quantizer kernel launched in plain stream order, then with PDL
        quantize.PDL = pdl
        print(f"quantizer PDL = {pdl}")
        table(f"_pdl{int(pdl)}")


def table(label):
    makers = {"AwqLinear g128": (lambda lin: AwqLinear.from_linear(lin, 128), torch.float16),
              "QuantizedLinear int4 g128": (lambda lin: QuantizedLinear.from_linear(lin, 4, 128), torch.bfloat16),
              "Int8Linear": (lambda lin: Int8Linear.from_linear(lin), torch.bfloat16),
              "Fp8Linear": (lambda lin: Fp8Linear.from_linear(lin), torch.bfloat16)}
    rows = []
    for name, (make, dtype) in makers.items():
        if label == "_pdl0" and name.split()[0] not in ("Int8Linear", "Fp8Linear"):
            continue
        layers = [make(nn.Linear(K, N, device="cuda").to(dtype)) for _ in range(COPIES)]
        for m in (1, 16, 256):
            x = torch.randn(m, K, device="cuda").to(dtype)
            with torch.inference_mode():
                t_layer = statistics.median(graph_time_us([lambda lay=lay: lay(x) for lay in layers])[0]
                                            for _ in range(3))
                t_op = statistics.median(graph_time_us([op_call(lay, x) for lay in layers])[0] for _ in range(3))
            rows.append(dict(layer=name, m=m, layer_us=t_layer, op_us=t_op, overhead_us=t_layer - t_op))
            print(f"{name:26s} M={m:4d}  layer {t_layer:7.2f} us  op {t_op:7.2f} us  (+{t_layer - t_op:.2f})",
                  flush=True)
        del layers
    with open(os.path.join(os.environ.get("OUT", "."), f"layer_overhead36{label}.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
