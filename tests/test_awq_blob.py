"""CPU tier: AWQ from the SM90 blob alone (weight_only/awq_blob.py) and AwqLinear's "sm90_blob" layout - the exact
round trip qweight -> blob -> qweight, the argument checks, the layer's buffers and state dict in both layouts, the
torch op's fake implementation and compiled tracing up to the device check."""

import gc

import pytest
import torch

import cute_kernels as ck
from cute_kernels.formats.awq import awq_quantize
from cute_kernels.nn import AwqLinear, set_awq_weight_layout_
from cute_kernels.weight_only import awq_blob, awq_blob_linear, awq_blob_to_qweight, awq_sm90, wgmma
from cute_kernels.weight_only.awq_blob import blob_shape, check_blob_operands

ops = torch.ops.cute_kernels


def _checkpoint(ic, oc, g, seed=0, dtype=torch.float16):
    torch.manual_seed(seed)
    qweight, qzeros, scales = awq_quantize(torch.randn(ic, oc), g, scale_dtype=dtype)
    return qweight, scales, qzeros


@pytest.mark.parametrize("ic,oc", [(256, 200), (4160, 1032), (192, 72), (64, 8), (128, 64)])
def test_blob_round_trip_is_exact(ic, oc):
    """Every nibble comes back, OC and IC padded to the 64 x 64 blocks or not; the codes equal the blob the repack
    route builds (``wgmma.codes_from_blob``'s view of the same weight)."""
    qweight, _, _ = _checkpoint(ic, oc, ic)
    blob = awq_blob(qweight)
    assert tuple(blob.shape) == blob_shape(ic, oc) and blob.dtype == torch.int64
    assert torch.equal(awq_blob_to_qweight(blob, ic, oc), qweight)
    from cute_kernels.formats.awq import unpack_int4

    codes = wgmma.codes_from_blob(blob, 4, "awq", oc, ic)
    assert torch.equal(codes, unpack_int4(qweight).t().to(torch.int64))


def test_blob_round_trip_in_chunks(monkeypatch):
    """The inverse walks a few 64-channel blocks at a time (``CHUNK_CODES``): chunks of one and of three blocks."""
    qweight, _, _ = _checkpoint(256, 456, 128, seed=3)
    blob = awq_blob(qweight)
    for codes in (256 * 64, 3 * 256 * 64):
        monkeypatch.setattr(wgmma, "CHUNK_CODES", codes)
        assert torch.equal(awq_sm90.qweight_from_blob(blob, 256, 456), qweight)


def test_blob_argument_checks():
    qweight, scales, qzeros = _checkpoint(256, 64, 128)
    blob = awq_blob(qweight)
    x = torch.randn(3, 256, dtype=torch.float16)
    assert check_blob_operands(x, blob, scales, qzeros) == (256, 64, 128)
    cases = [
        (lambda: awq_blob(qweight.to(torch.int64)), TypeError, "^qweight must be an int32 tensor"),
        (lambda: awq_blob(qweight[0]), ValueError, "^qweight must be 2-D"),
        (lambda: awq_blob_to_qweight(blob, 256, 60), ValueError, "^out_features = 60 must be a multiple of 8"),
        (lambda: awq_blob_to_qweight(blob, 0, 64), ValueError, "^in_features must be a positive int"),
        (lambda: awq_blob_to_qweight(blob, 512, 64), ValueError, r"^blob must be a contiguous .* = \[1, 2048\]"),
        (lambda: awq_blob_to_qweight(blob.view(torch.int32), 256, 64), TypeError, "^blob must be an int64 tensor"),
        (lambda: check_blob_operands(x.float(), blob, scales, qzeros), TypeError, "^x must have dtype float16, bfloat16"),
        (lambda: check_blob_operands(x, blob, scales.bfloat16(), qzeros), TypeError, "^scales must have x's dtype"),
        (lambda: check_blob_operands(x, blob, scales, qzeros.to(torch.int64)), TypeError,
         "^qzeros must be an int32 tensor"),
        (lambda: check_blob_operands(x, blob, scales, qzeros[:, :4]), ValueError,
         r"^qzeros must be \[IC / G, OC / 8\]"),
        (lambda: check_blob_operands(x[:, :96], blob, scales, qzeros), ValueError,
         "^group size G = IC / scales.shape.0. = 48 must be 32 or a multiple of 64"),
        (lambda: check_blob_operands(x, blob[:, :512], scales, qzeros), ValueError, "^blob must be a contiguous"),
        (lambda: check_blob_operands(x, torch.zeros(1, 2048, dtype=torch.int64)[:, ::2], scales, qzeros), ValueError,
         "not contiguous"),
        (lambda: awq_blob_linear(x, blob, scales, qzeros), ValueError, "^x must be a CUDA tensor"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()


@pytest.mark.parametrize("ic,oc,g", [(256, 200, 128), (4096, 1000, 64), (128, 64, 32), (192, 72, 192)])
def test_layer_layouts_share_one_state_dict(ic, oc, g):
    """The blob layout drops ``qweight`` from the buffers; its state dict equals the checkpoint layout's (qweight
    rebuilt); ``load_state_dict`` turns a loaded qweight into the blob; converting back restores the buffer."""
    layer = AwqLinear.from_linear(torch.nn.Linear(ic, oc), g)
    before = layer.state_dict()
    assert layer.set_weight_layout_("sm90_blob") is layer
    assert "weight_layout=sm90_blob" in repr(layer)
    assert "qweight" not in layer._buffers and tuple(layer.blob.shape) == blob_shape(ic, oc)
    assert "blob" not in layer.state_dict()
    after = layer.state_dict()
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert torch.equal(layer.checkpoint_qweight(), before["qweight"])

    other = AwqLinear.from_linear(torch.nn.Linear(ic, oc), g)
    blob_version = layer.blob._version
    layer.load_state_dict(other.state_dict())
    assert layer.blob._version > blob_version  # written in place: the derived caches key on the version
    assert torch.equal(layer.blob, awq_blob(other.qweight))
    assert torch.equal(layer.scales, other.scales) and torch.equal(layer.qzeros, other.qzeros)
    layer.set_weight_layout_("checkpoint")
    assert "blob" not in layer._buffers and torch.equal(layer.qweight, other.qweight)
    assert "weight_layout" not in repr(layer)


def test_layer_blob_layout_holds_qweight_bytes_once():
    """The layer's buffers: blob instead of qweight - the same bytes where OC and IC fill whole 64 x 64 blocks."""
    layer = AwqLinear.from_linear(torch.nn.Linear(1024, 512), 128)
    held = lambda: sum(b.numel() * b.element_size() for b in layer.buffers())  # noqa: E731
    checkpoint_bytes = held()
    layer.set_weight_layout_("sm90_blob")
    assert held() == checkpoint_bytes and layer.blob.numel() * 8 == 1024 * 512 // 2


def test_layer_blob_layout_errors():
    layer = AwqLinear(256, 64)
    with pytest.raises(ValueError, match="^layout must be one of"):
        layer.set_weight_layout_("blob")
    with pytest.raises(ValueError, match="^layout 'sm90_blob' needs .* group_size = 96"):
        AwqLinear(192, 64, group_size=96).set_weight_layout_("sm90_blob")
    model = torch.nn.Sequential(AwqLinear(256, 64), torch.nn.ReLU(), AwqLinear(96, 64, group_size=96))
    with pytest.raises(ValueError, match=r"^2: layout 'sm90_blob'"):
        set_awq_weight_layout_(model, "sm90_blob")
    assert model[0].weight_layout == "checkpoint"  # every layer checked before the first is converted
    model = torch.nn.Sequential(AwqLinear(256, 64), torch.nn.ReLU(), AwqLinear(64, 64, group_size=64))
    assert set_awq_weight_layout_(model, "sm90_blob") == 2
    state = model.state_dict()
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "0.qweight"'):
        model.load_state_dict({k: v for k, v in state.items() if k != "0.qweight"})
    model.load_state_dict({k: v for k, v in state.items() if k != "0.qweight"}, strict=False)
    state["0.qweight"] = state["0.qweight"][:, :4]
    with pytest.raises(RuntimeError, match=r"0.qweight: must be an int32 tensor \[256, 8\]"):
        model.load_state_dict(state)


def test_layer_blob_layout_reaches_the_ops_device_check():
    """Eager and compiled (fullgraph: the layer calls ``torch.ops.cute_kernels.awq_blob_linear``), the op refuses
    CPU tensors by name; the fake implementation gives the shape."""
    layer = AwqLinear.from_linear(torch.nn.Linear(128, 16), 64).set_weight_layout_("sm90_blob")
    x = torch.randn(2, 3, 128).half()
    for fn in (layer, torch.compile(layer, fullgraph=True, backend="aot_eager")):
        with pytest.raises(ValueError, match="CUDA"):
            fn(x)
    meta = lambda t: torch.empty_like(t, device="meta")  # noqa: E731
    out = ops.awq_blob_linear(meta(x), meta(layer.blob), meta(layer.scales), meta(layer.qzeros))
    assert out.shape == (2, 3, 16) and out.dtype == torch.float16
    with pytest.raises(ValueError, match="^blob must be a contiguous"):
        ops.awq_blob_linear(meta(x), meta(layer.blob[:, :128]), meta(layer.scales), meta(layer.qzeros))


def test_blob_weights_do_not_keep_the_blob_alive():
    """The cache entry of a caller's blob holds no reference to it (else the layer's blob would never be freed)."""
    qweight, scales, qzeros = _checkpoint(256, 64, 128)
    blob = awq_blob(qweight)
    aw = awq_sm90.blob_weights(blob, 256, scales, qzeros, 128)
    assert aw.blob is None and aw.out_features == 64 and aw.group == 128
    assert aw.params("awq", torch.float16).shape == (2 * 2, 64)  # the words: 2 per (group, row), built without it
    assert aw.params("awq_fma", torch.float16).shape == (2, 64)  # one-fma words: 1 per (group, row)
    assert awq_sm90.cached(awq_sm90.blob_key(blob, scales, qzeros)) is aw
    del blob, aw
    gc.collect()
    assert not any(k[0] == "blob" for k in awq_sm90._cache)


def test_public_names():
    assert ck.awq_blob is awq_blob and ck.awq_blob_linear is awq_blob_linear
    assert ck.awq_blob_to_qweight is awq_blob_to_qweight


class WQLinear_GEMM(torch.nn.Module):  # noqa: N801 - AutoAWQ's class name and attributes, without AutoAWQ
    def __init__(self, ic, oc, g, bias=True, seed=0):
        super().__init__()
        self.w_bit, self.group_size, self.in_features, self.out_features = 4, g, ic, oc
        qweight, scales, qzeros = _checkpoint(ic, oc, ic if g == -1 else g, seed)
        self.register_buffer("qweight", qweight)
        self.register_buffer("qzeros", qzeros)
        self.register_buffer("scales", scales)
        self.register_buffer("bias", torch.randn(oc).half() if bias else None)


class _Block(torch.nn.Module):
    def __init__(self, g=128):
        super().__init__()
        self.q_proj = WQLinear_GEMM(256, 128, g, seed=1)
        self.mlp = torch.nn.Sequential(WQLinear_GEMM(128, 64, 64, bias=False, seed=2), torch.nn.GELU())


@pytest.mark.parametrize("layout", ["checkpoint", "sm90_blob"])
def test_replace_autoawq_linears(layout):
    """Every WQLinear_GEMM of a nested model becomes an AwqLinear over the same tensors (the blob layout: the same
    state dict), other modules untouched."""
    model = torch.nn.ModuleDict({"a": _Block(), "b": _Block(), "norm": torch.nn.LayerNorm(8)})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scales = model["a"].q_proj.scales
    assert ck.nn.replace_autoawq_linears_(model, layout) == 4
    layers = [m for m in model.modules() if isinstance(m, AwqLinear)]
    assert len(layers) == 4 and all(m.weight_layout == layout for m in layers)
    assert not any(type(m).__name__ == "WQLinear_GEMM" for m in model.modules())
    assert model["a"].q_proj.scales is scales and isinstance(model["a"].mlp[1], torch.nn.GELU)
    after = model.state_dict()
    assert set(after) == set(before) and all(torch.equal(after[k], before[k]) for k in before)


def test_replace_autoawq_linears_refuses_before_swapping():
    model = torch.nn.ModuleDict({"a": _Block(), "b": _Block(g=32)})
    model["b"].q_proj.scales = model["b"].q_proj.scales[:, :64]  # the second block is malformed: nothing swapped
    with pytest.raises(ValueError, match=r"^b.q_proj: module.scales must be float16 \[8, 128\]"):
        ck.nn.replace_autoawq_linears_(model, "sm90_blob")
    assert not any(isinstance(m, AwqLinear) for m in model.modules())
    model = torch.nn.ModuleDict({"a": _Block(), "b": _Block(g=32)})
    model["b"].mlp[0] = WQLinear_GEMM(96, 64, 96)
    with pytest.raises(ValueError, match=r"^b.mlp.0: layout 'sm90_blob' needs .* group_size = 96"):
        ck.nn.replace_autoawq_linears_(model, "sm90_blob")
    assert not any(isinstance(m, AwqLinear) for m in model.modules())
    assert ck.nn.replace_autoawq_linears_(model) == 4  # the checkpoint layout takes any group
    with pytest.raises(ValueError, match="^weight_layout must be one of"):
        ck.nn.replace_autoawq_linears_(model, "blob")
    gemv = WQLinear_GEMM(256, 128, 128)
    gemv.qweight = gemv.qweight.reshape(128, 32)[:, :16].contiguous()  # GEMV's [OC, IC / 8]
    with pytest.raises(ValueError, match=r"^module.qweight must be int32 \[256, 16\]"):
        AwqLinear.from_autoawq(gemv)
    with pytest.raises(ValueError, match="^model is itself"):
        ck.nn.replace_autoawq_linears_(WQLinear_GEMM(256, 128, 128))
