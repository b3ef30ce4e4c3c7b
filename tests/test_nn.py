"""CPU tier: the linear layers (cute_kernels/nn.py) and the int8 row quantizer - buffers and state-dict keys (AutoAWQ's
and DeepSeek-V3's names), from_linear against the formats' quantizers, state-dict round trips, argument errors, and
compiled tracing up to the real op (which refuses CPU tensors)."""

import pytest
import torch
from torch import nn

import cute_kernels
from cute_kernels.formats.awq import awq_dequantize_float, awq_quantize
from cute_kernels.formats.bitpack import quantize_weights, unpack_weights
from cute_kernels.formats.fp8 import (dequantize_fp8_blockwise, dequantize_fp8_rowwise, quantize_fp8_blockwise,
                                      quantize_fp8_rowwise)
from cute_kernels.formats.int8 import quantize_int8_rowwise
from cute_kernels.nn import AwqLinear, Fp8Linear, Fp8RowwiseLinear, Int8Linear, QuantizedLinear


def _linear(i=256, o=72, bias=True, dtype=torch.float16, seed=0):
    torch.manual_seed(seed)
    lin = nn.Linear(i, o, bias=bias)
    return lin.to(dtype)


def test_quantize_int8_rowwise():
    t = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [254.0, -127.0, 1.0]])
    q, s = quantize_int8_rowwise(t)
    assert q.dtype == torch.int8 and s.dtype == torch.float32 and s.shape == (3,)
    assert torch.equal(q[0], torch.tensor([64, -127, 32], dtype=torch.int8))  # 63.5 rounds to even 64
    assert torch.equal(q[1], torch.zeros(3, dtype=torch.int8)) and s[1] > 0
    assert torch.equal(q[2], torch.tensor([127, -64, 0], dtype=torch.int8))  # -63.5 -> -64, 0.5 -> 0
    x = torch.randn(2, 5, 64)
    q, s = quantize_int8_rowwise(x)
    assert q.shape == x.shape and s.shape == (2, 5)
    assert ((q.float() * s[..., None] - x).abs() <= s[..., None] / 2 + 1e-7).all()
    with pytest.raises(TypeError, match="^t must"):
        quantize_int8_rowwise(torch.zeros(3, dtype=torch.int32))


def test_awq_linear_has_autoawq_buffers():
    """WQLinear_GEMM's state dict: qweight int32 [IC, OC/8], qzeros int32 [IC/G, OC/8], scales [IC/G, OC], bias
    [OC] in the layer's dtype."""
    layer = AwqLinear(256, 72, 64, dtype=torch.bfloat16)
    sd = layer.state_dict()
    assert list(sd) == ["bias", "qweight", "qzeros", "scales"]
    assert (sd["qweight"].shape, sd["qweight"].dtype) == ((256, 9), torch.int32)
    assert (sd["qzeros"].shape, sd["qzeros"].dtype) == ((4, 9), torch.int32)
    assert (sd["scales"].shape, sd["scales"].dtype) == ((4, 72), torch.bfloat16)
    assert (sd["bias"].shape, sd["bias"].dtype) == ((72,), torch.bfloat16)
    assert AwqLinear(256, 72, -1, bias=False).group_size == 256


def test_awq_linear_from_linear_and_state_dict():
    lin = _linear()
    layer = AwqLinear.from_linear(lin, 128)
    qweight, qzeros, scales = awq_quantize(lin.weight.detach().t(), 128, scale_dtype=torch.float16)
    assert torch.equal(layer.qweight, qweight) and torch.equal(layer.qzeros, qzeros)
    assert torch.equal(layer.scales, scales) and torch.equal(layer.bias, lin.bias.detach())
    w = awq_dequantize_float(layer.qweight, layer.scales, layer.qzeros).t()
    assert (w - lin.weight.float()).abs().max() <= layer.scales.float().max() * 0.51 + 1e-3
    fresh = AwqLinear(256, 72, 128)
    fresh.load_state_dict(layer.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), layer.state_dict().values()))


def test_awq_linear_from_autoawq_shares_the_tensors():
    class WQLinearGEMM(nn.Module):  # AutoAWQ's attributes, without AutoAWQ
        def __init__(self):
            super().__init__()
            self.w_bit, self.group_size, self.in_features, self.out_features = 4, 64, 128, 16
            self.register_buffer("qweight", torch.randint(-2**31, 2**31 - 1, (128, 2), dtype=torch.int32))
            self.register_buffer("qzeros", torch.randint(-2**31, 2**31 - 1, (2, 2), dtype=torch.int32))
            self.register_buffer("scales", torch.rand(2, 16).half())
            self.register_buffer("bias", None)

    src = WQLinearGEMM()
    layer = AwqLinear.from_autoawq(src)
    assert layer.qweight is src.qweight and layer.scales is src.scales and layer.bias is None
    src.w_bit = 8
    with pytest.raises(ValueError, match="^module.w_bit must be 4"):
        AwqLinear.from_autoawq(src)


@pytest.mark.parametrize("bits,group", [(4, 128), (2, None), (8, 64), (1, 32)])
def test_quantized_linear_from_linear_and_extra_state(bits, group):
    lin = _linear(dtype=torch.bfloat16)
    layer = QuantizedLinear.from_linear(lin, bits, group)
    w_packed, scale, gs = quantize_weights(lin.weight.detach(), bits, group)
    assert torch.equal(layer.w_packed, w_packed) and layer.scale == scale
    assert (gs is None and layer.group_scales is None) or torch.equal(layer.group_scales, gs)
    sd = layer.state_dict()
    assert sd["_extra_state"] == {"scale": scale}
    fresh = QuantizedLinear(256, 72, bits, group)
    fresh.load_state_dict(sd)
    assert fresh.scale == scale and torch.equal(fresh.w_packed, w_packed)
    assert unpack_weights(fresh.w_packed, bits, 256).shape == (72, 256)


def test_int8_and_fp8_linear_from_linear():
    lin = _linear(256, 72, dtype=torch.bfloat16)
    layer = Int8Linear.from_linear(lin)
    assert list(layer.state_dict()) == ["bias", "weight", "weight_scale"]
    w = layer.weight.float() * layer.weight_scale[:, None]
    assert ((w - lin.weight.float()).abs() <= layer.weight_scale[:, None] / 2 + 1e-6).all()
    f8 = Fp8Linear.from_linear(lin)
    assert list(f8.state_dict()) == ["bias", "weight", "weight_scale_inv"]  # DeepSeek-V3's key names
    assert f8.weight.dtype == torch.float8_e4m3fn and f8.weight_scale_inv.shape == (1, 2)
    q, s = quantize_fp8_blockwise(lin.weight.detach(), 128)
    assert torch.equal(f8.weight.view(torch.uint8), q.view(torch.uint8)) and torch.equal(f8.weight_scale_inv, s)
    assert (dequantize_fp8_blockwise(f8.weight, f8.weight_scale_inv) - lin.weight.float()).abs().max() < 0.02


def test_fp8_rowwise_linear_from_linear_and_column_scales():
    lin = _linear(256, 72, dtype=torch.bfloat16)
    layer = Fp8RowwiseLinear.from_linear(lin)
    assert list(layer.state_dict()) == ["bias", "weight", "weight_scale"]  # the FP8-dynamic checkpoints' names
    q, s = quantize_fp8_rowwise(lin.weight.detach())
    assert layer.weight.dtype == torch.float8_e4m3fn and layer.weight_scale.shape == (72,)
    assert torch.equal(layer.weight.view(torch.uint8), q.view(torch.uint8)) and torch.equal(layer.weight_scale, s)
    w = lin.weight.float()
    assert ((dequantize_fp8_rowwise(layer.weight, layer.weight_scale) - w).abs()
            <= w.abs().amax(1, keepdim=True) * 2.0 ** -4).all()
    # a checkpoint's per-channel scale stored as an [N, 1] column (compressed-tensors) loads into the [N] buffer,
    # for the int8 layer too; other shapes are still refused by name
    for cls in (Fp8RowwiseLinear, Int8Linear):
        src = cls.from_linear(lin)
        sd = src.state_dict()
        sd["weight_scale"] = sd["weight_scale"].reshape(72, 1).clone()
        fresh = cls(256, 72)
        fresh.load_state_dict(sd)
        assert fresh.weight_scale.shape == (72,) and torch.equal(fresh.weight_scale, src.weight_scale)
        assert sd["weight_scale"].shape == (72, 1)  # the caller's dict is left as it was
        sd["weight_scale"] = sd["weight_scale"].reshape(1, 72)
        with pytest.raises(RuntimeError, match="weight_scale"):
            fresh.load_state_dict(sd)


def test_layer_argument_errors():
    cases = [
        (lambda: AwqLinear(100, 64, 128), "group_size = 128 must divide in_features = 100"),
        (lambda: AwqLinear(128, 12), "out_features = 12 must be a multiple of 8"),
        (lambda: AwqLinear(128, 16, dtype=torch.float32), "dtype must be torch.float16 or torch.bfloat16"),
        (lambda: QuantizedLinear(128, 16, 3), "bits"),
        (lambda: QuantizedLinear(128, 16, 4, 48), "group_size must be None or a multiple of 32"),
        (lambda: Int8Linear(100, 16), "in_features must be a multiple of 16"),
        (lambda: Fp8Linear(192, 16), "in_features must be a multiple of 128"),
        (lambda: Int8Linear(0, 16), "in_features must be a positive int"),
        (lambda: Fp8RowwiseLinear(40, 16), "in_features must be a multiple of 16"),
        (lambda: Fp8RowwiseLinear(64, 12), "out_features of 8"),
    ]
    for make, message in cases:
        with pytest.raises((ValueError, TypeError), match=message):
            make()
    layer = AwqLinear(128, 16)
    with pytest.raises(ValueError, match=r"^x must be \[..., in_features = 128\]"):
        layer(torch.zeros(3, 64, dtype=torch.float16))
    with pytest.raises(TypeError, match="^x must be float16 or bfloat16"):
        Int8Linear(128, 16)(torch.zeros(3, 128))


@pytest.mark.parametrize("make", [lambda: AwqLinear(128, 16), lambda: QuantizedLinear(128, 16, 4, 64),
                                  lambda: Int8Linear(128, 16), lambda: Fp8Linear(128, 16),
                                  lambda: Fp8RowwiseLinear(128, 16)])
def test_layers_on_cpu_reach_the_ops_device_check(make):
    """Eager and compiled (fullgraph: no graph break before the op), the op refuses CPU tensors by name."""
    layer = make()
    dtype = torch.float16 if isinstance(layer, AwqLinear) else torch.bfloat16
    x = torch.randn(2, 3, 128).to(dtype)
    for fn in (layer, torch.compile(layer, fullgraph=True, backend="aot_eager")):
        with pytest.raises(ValueError, match="CUDA"):
            fn(x)


def test_int8_linear_asymmetric_activations_state():
    """The zero-point sums derive from the weight: not in the state dict, rebuilt by from_linear, by
    load_state_dict and (eager) when the weight's version moves."""
    lin = _linear(256, 72, dtype=torch.bfloat16)
    layer = Int8Linear.from_linear(lin, activations="asymmetric")
    assert "activations=asymmetric" in repr(layer)
    assert list(layer.state_dict()) == ["bias", "weight", "weight_scale"]  # the symmetric layer's keys
    assert torch.equal(layer.azp_adj, layer.weight.sum(1, dtype=torch.int32))
    fresh = Int8Linear(256, 72, activations="asymmetric")
    fresh.load_state_dict(layer.state_dict())
    assert torch.equal(fresh.azp_adj, layer.azp_adj)
    with pytest.raises(ValueError, match="activations must be one of"):
        Int8Linear(256, 72, activations="zero_point")


def test_int8_linear_asymmetric_inference_mode_meta_assign_and_pickle():
    """The derived zero-point sums under inference mode (inference tensors have no version counter), after a meta
    layer's load_state_dict(assign=True) (the buffer follows the weight's device), and through pickling."""
    import io

    lin = _linear(256, 72, dtype=torch.bfloat16)
    with torch.inference_mode():
        layer = Int8Linear.from_linear(lin, activations="asymmetric")
        assert torch.equal(layer.azp_adj, layer.weight.sum(1, dtype=torch.int32))
        assert layer._summed == layer._weight_key()
    sd = Int8Linear.from_linear(lin, activations="asymmetric").state_dict()
    with torch.device("meta"):
        meta = Int8Linear(256, 72, activations="asymmetric")
    meta.load_state_dict(sd, assign=True)
    assert meta.azp_adj.device.type == "cpu" and torch.equal(meta.azp_adj, sd["weight"].sum(1, dtype=torch.int32))
    buf = io.BytesIO()
    torch.save(meta, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    assert torch.equal(again.azp_adj, meta.azp_adj) and again.activations == "asymmetric"
