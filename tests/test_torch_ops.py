"""CPU tier: the torch.library registrations (cute_kernels/torch_ops.py) - schemas, fake implementations on meta
tensors, tracing by torch.export / make_fx / torch.compile(fullgraph=True) without a GPU."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import cute_kernels  # noqa: F401 - registers torch.ops.cute_kernels.*
from cute_kernels import torch_ops

ops = torch.ops.cute_kernels
META = "meta"


def _int8(m=5, n=32, k=64, batch=None, device=META):
    lead = () if batch is None else (batch,)
    a = torch.empty(*lead, m, k, dtype=torch.int8, device=device)
    b = torch.empty(*lead, n, k, dtype=torch.int8, device=device).transpose(-1, -2)
    return a, b, torch.empty(m, device=device), torch.empty(n, device=device)


def _awq(ic=256, oc=64, group=128, dtype=torch.float16, device=META):
    return (torch.empty(ic, oc // 8, dtype=torch.int32, device=device),
            torch.empty(ic // group, oc, dtype=dtype, device=device),
            torch.empty(ic // group, oc // 8, dtype=torch.int32, device=device))


def test_every_public_op_is_registered():
    for name in torch_ops.REGISTERED:
        assert not isinstance(getattr(cute_kernels, name), torch._ops.OpOverloadPacket)  # plain function: fast path
        schema = str(getattr(ops, name).default._schema)
        assert schema.startswith(f"cute_kernels::{name}(") and schema.endswith(
            ("-> Tensor", "-> (Tensor, Tensor)", "-> (Tensor, Tensor, Tensor)"))


def test_fake_shapes_and_dtypes():
    a, b, sa, sb = _int8()
    assert ops.int8_scaled_mm(a, b, sa, sb).shape == (5, 32)
    assert ops.int8_scaled_mm(a, b, sa, sb, None, torch.float16).dtype == torch.float16
    assert ops.int8_scaled_mm(*_int8(batch=3)).shape == (3, 5, 32)
    zp = torch.empty(32, dtype=torch.int32, device=META), torch.empty(5, dtype=torch.int32, device=META)
    assert ops.int8_scaled_mm(a, b, sa, sb, None, torch.bfloat16, *zp).shape == (5, 32)

    fa = torch.empty(2, 4, 256, dtype=torch.float8_e4m3fn, device=META)
    fb = torch.empty(2, 384, 256, dtype=torch.float8_e4m3fn, device=META)
    sfa, sfb = torch.empty(2, 4, 2, device=META), torch.empty(2, 3, 2, device=META)
    out = ops.fp8_blockwise_scaled_mm(fa, fb, sfa, sfb, torch.float16, [128, 128, 128])
    assert out.shape == (2, 4, 384) and out.dtype == torch.float16
    fbias = torch.empty(384, dtype=torch.float16, device=META)
    assert ops.fp8_blockwise_scaled_mm(fa, fb, sfa, sfb, torch.float16, [128, 128, 128], fbias).shape == (2, 4, 384)
    masked_m = torch.empty(2, dtype=torch.int32, device=META)
    grouped = ops.fp8_blockwise_grouped_mm(fa, fb, sfa, sfb, masked_m, torch.float16, [128, 128, 128], 2)
    assert grouped.shape == (2, 4, 384) and grouped.dtype == torch.float16
    with pytest.raises(ValueError, match="^a must be 3-D"):
        ops.fp8_blockwise_grouped_mm(fa[0], fb[0], sfa[0], sfb[0], masked_m)
    ca, cs = torch.empty(256, 256, dtype=torch.float8_e4m3fn, device=META), torch.empty(256, 2, device=META)
    ids = torch.empty(256, dtype=torch.int32, device=META)
    contiguous = ops.fp8_blockwise_grouped_mm_contiguous(ca, fb, cs, sfb, ids, torch.float16)
    assert contiguous.shape == (256, 384) and contiguous.dtype == torch.float16
    with pytest.raises(ValueError, match="^b must be 3-D"):
        ops.fp8_blockwise_grouped_mm_contiguous(ca, fb[0], cs, sfb[0], ids)

    x = torch.empty(3, 512, dtype=torch.bfloat16, device=META)
    w = torch.empty(96, 512 * 2 // 8, dtype=torch.uint8, device=META)
    assert ops.quantized_mm(x, w, 0.5, 2).shape == (3, 96)
    assert ops.quantized_mm(x, w, 0.5, 2, None, torch.float32).dtype == torch.float32

    qw, sc, qz = _awq()
    xa = torch.empty(7, 256, dtype=torch.float16, device=META)
    assert ops.awq_gemm(xa, qw, sc, qz).shape == (7, 64)
    assert ops.awq_gemm(xa, qw, sc, qz, torch.empty(64, dtype=torch.float16, device=META)).shape == (7, 64)
    assert ops.awq_linear(torch.empty(2, 3, 256, dtype=torch.float16, device=META), qw, sc, qz).shape == (2, 3, 64)
    deq = ops.awq_dequantize(qw, sc, qz)
    assert deq.shape == (256, 64) and deq.dtype == torch.float16


def test_fake_implementations_reject_what_the_shape_depends_on():
    a, b, sa, sb = _int8()
    with pytest.raises(ValueError, match="inner dimensions must match"):
        ops.int8_scaled_mm(a[:, :48], b, sa, sb)
    with pytest.raises(TypeError, match="^a "):
        ops.int8_scaled_mm(a.float(), b, sa, sb)
    with pytest.raises(ValueError, match="batch sizes differ"):
        ops.int8_scaled_mm(*_int8(batch=2)[:1], _int8(batch=3)[1], sa, sb)
    x = torch.empty(3, 512, dtype=torch.bfloat16, device=META)
    with pytest.raises(ValueError, match="bits must be"):
        ops.quantized_mm(x, torch.empty(96, 64, dtype=torch.uint8, device=META), 1.0, 3)
    with pytest.raises(ValueError, match=r"w_packed must have shape \[N, K \* bits / 8\]"):
        ops.quantized_mm(x, torch.empty(96, 64, dtype=torch.uint8, device=META), 1.0, 2)
    with pytest.raises(ValueError, match="IC = qweight.shape"):
        ops.awq_gemm(torch.empty(7, 128, dtype=torch.float16, device=META), *_awq())


class _Layer(torch.nn.Module):
    def forward(self, a, b, sa, sb, x, qw, sc, qz):
        y = ops.int8_scaled_mm(a, b, sa, sb)
        z = ops.awq_linear(x, qw, sc, qz)
        return y.float().sum() + z.float().sum()


def test_export_keeps_each_op_as_one_node():
    x = torch.empty(2, 3, 256, dtype=torch.float16, device=META)
    ep = torch.export.export(_Layer(), (*_int8(), x, *_awq()))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count("cute_kernels.int8_scaled_mm.default") == 1
    assert targets.count("cute_kernels.awq_linear.default") == 1


def test_make_fx_fake_tracing_on_cpu_tensors():
    a, b, sa, sb = (torch.zeros(t.shape, dtype=t.dtype).as_strided(t.shape, t.stride()) for t in _int8())
    g = make_fx(lambda *t: ops.int8_scaled_mm(*t) * 2, tracing_mode="fake")(a, b, sa, sb)
    assert "cute_kernels.int8_scaled_mm" in g.code


def test_compile_fullgraph_reaches_the_real_op():
    """fullgraph=True would raise on a graph break; on CPU tensors the traced graph then runs the real op, whose own
    argument check is what fails (no GPU here)."""
    a, b, sa, sb = (torch.zeros(t.shape, dtype=t.dtype).as_strided(t.shape, t.stride()) for t in _int8())
    f = torch.compile(lambda a, b, sa, sb: ops.int8_scaled_mm(a, b, sa, sb) + 1, fullgraph=True, backend="aot_eager")
    with pytest.raises(ValueError, match="CUDA"):
        f(a, b, sa, sb)
