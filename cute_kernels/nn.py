"""Linear layers over the ops: quantized weights held as buffers, ``forward(x [..., in_features])``.

=================  ==============================================================================================
``AwqLinear``      AutoAWQ int4 (``awq_linear``). Buffers and state-dict keys are those of AutoAWQ's
                   ``WQLinear_GEMM`` (``qweight``, ``qzeros``, ``scales``, ``bias``): a checkpoint's layer loads as it
                   is, with ``load_state_dict`` or ``from_autoawq``. ``set_weight_layout_("sm90_blob")`` (or
                   ``set_awq_weight_layout_(model, ...)``) keeps the SM90 kernels' blob in place of ``qweight``:
                   1.2-1.3x qweight's bytes on an H100 instead of 3.2-3.4x, the same state dict.
                   ``replace_autoawq_linears_(model, weight_layout)`` swaps a loaded AutoAWQ model's
                   ``WQLinear_GEMM`` modules for AwqLinear layers in one call.
``QuantizedLinear`` 1/2/4/8-bit symmetric weights (``quantized_mm``; ``formats.bitpack``): ``w_packed``,
                   ``group_scales``, the per-tensor ``scale`` in the extra state.
``Int8Linear``     W8A8 (``int8_scaled_mm``): int8 ``weight`` [N, K] with a float32 ``weight_scale`` per output channel;
                   activations quantized per token at each call (``per_token_quant_int8``), the bias in the epilogue;
                   ``activations="asymmetric"``: per-token zero points too (vLLM's azp path).
``Fp8Linear``      DeepSeek-V3 FP8 (``fp8_blockwise_scaled_mm``): e4m3 ``weight`` [N, K] and ``weight_scale_inv``
                   per 128 x 128 block (the keys of DeepSeek-V3's checkpoints; the value multiplies, as there);
                   activations quantized per token in 1 x 128 groups at each call (``per_token_group_quant_fp8``),
                   the bias in the epilogue.
``Fp8RowwiseLinear`` per-channel FP8 (``fp8_scaled_mm``): e4m3 ``weight`` [N, K] with a float32 ``weight_scale`` per
                   output channel (the "FP8-dynamic" checkpoints of vLLM / llm-compressor: their ``[N, 1]`` scale
                   loads as it is); activations quantized per token at each call (``per_token_quant_fp8``), the bias
                   in the epilogue.
=================  ==============================================================================================

``from_linear(linear, ...)`` quantizes a float ``nn.Linear`` with the formats' plain rules (round to nearest with
max-abs or min/max scales; no calibration, no activation-aware search: for calibrated weights load the checkpoint's
tensors instead). The weights are frozen buffers; x is differentiable through AwqLinear and QuantizedLinear
(``autograd.py``), so adapters can train on top of them; Int8Linear and the FP8 layers quantize x, and a gradient asked
through them raises at backward. Under ``torch.compile`` the layers call the
``torch.ops.cute_kernels`` ops (one graph node each, no graph break); in eager code the plain functions.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from .formats.awq import awq_quantize
from .formats.bitpack import check_bits, quantize_weights
from .autograd import needs_grad, record
from .formats.fp8 import quantize_fp8_blockwise, quantize_fp8_rowwise
from .formats.int8 import quantize_int8_rowwise
from .ops.fp8_blockwise_scaled_mm import fp8_blockwise_scaled_mm as _fp8_blockwise_scaled_mm
from .ops.int8_scaled_mm import fp8_scaled_mm as _fp8_scaled_mm
from .ops.int8_scaled_mm import int8_scaled_mm as _int8_scaled_mm
from .quantize import per_token_group_quant_fp8, per_token_quant_fp8, per_token_quant_int8
from .weight_only import awq_blob as _awq_blob
from .weight_only import awq_blob_linear as _awq_blob_linear
from .weight_only import awq_blob_to_qweight as _awq_blob_to_qweight
from .weight_only import awq_linear as _awq_linear
from .weight_only.awq_blob import layout_fits as _blob_layout_fits
from .weight_only import quantized_mm as _quantized_mm

_HALF = (torch.float16, torch.bfloat16)


def _compiling() -> bool:
    return torch.compiler.is_compiling()


def _positive(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{name} must be a positive int; got {v!r}")
    return v


def _check_input(layer: "_QuantizedLinear", x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[-1] != layer.in_features:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be [..., in_features = {layer.in_features}]; got {shape}")


class _QuantizedLinear(nn.Module):
    """Shared frame: the two extents, an optional frozen ``bias`` buffer [out_features], leading dims of x."""

    def __init__(self, in_features: int, out_features: int, bias: bool, bias_dtype: torch.dtype, device):
        super().__init__()
        self.in_features = _positive("in_features", in_features)
        self.out_features = _positive("out_features", out_features)
        self.register_buffer("bias", torch.zeros(out_features, dtype=bias_dtype, device=device) if bias else None)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

    def _bias_for(self, dtype: torch.dtype) -> Optional[torch.Tensor]:
        """The bias in ``dtype`` (a cast only when the layer's dtype differs from x's), or None."""
        return self.bias if self.bias is None or self.bias.dtype == dtype else self.bias.to(dtype)

    @staticmethod
    def _copy_bias(layer: "_QuantizedLinear", linear: nn.Linear) -> None:
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.detach().to(layer.bias.dtype))


def _check_blob_layout(in_features: int, group_size: int) -> None:
    if not _blob_layout_fits(in_features, group_size):
        raise ValueError(f"layout 'sm90_blob' needs in_features a multiple of 8 and group_size 32 or a multiple of 64 "
                         f"(the SM90 kernels' rule); got in_features = {in_features}, group_size = {group_size}")


def _check_autoawq_module(module: nn.Module) -> None:
    """An AutoAWQ GEMM module's int4 width and tensors (shapes, dtypes), before anything is built from it."""
    if getattr(module, "w_bit", 4) != 4:
        raise ValueError(f"module.w_bit must be 4 (AWQ GEMM int4); got {module.w_bit}")
    ic, oc, g = module.in_features, module.out_features, module.group_size
    g = ic if g == -1 else g
    dtype = module.scales.dtype
    expected = {"qweight": (torch.int32, (ic, oc // 8)), "qzeros": (torch.int32, (ic // g, oc // 8)),
                "scales": (dtype, (ic // g, oc)), "bias": (dtype, (oc,))}
    for name, (want_dtype, shape) in expected.items():
        t = getattr(module, name)
        if t is not None and (tuple(t.shape) != shape or t.dtype != want_dtype):
            # e.g. AutoAWQ's GEMV modules pack qweight along IC: [OC, IC / 8], the transpose of GEMM's
            raise ValueError(f"module.{name} must be {str(want_dtype).replace('torch.', '')} {list(shape)} "
                             f"(WQLinear_GEMM's layout for in_features = {ic}, out_features = {oc}, group_size = "
                             f"{module.group_size}); got {str(t.dtype).replace('torch.', '')} {list(t.shape)}")


class AwqLinear(_QuantizedLinear):
    """AWQ int4 linear layer (``awq_linear``) with AutoAWQ's ``WQLinear_GEMM`` buffers: ``qweight`` int32 [IC, OC/8],
    ``qzeros`` int32 [IC/G, OC/8], ``scales`` [IC/G, OC] and ``bias`` [OC] in ``dtype`` (x's dtype).

    ``weight_layout``: ``"checkpoint"`` (as built or loaded) or ``"sm90_blob"`` (``set_weight_layout_``): the layer
    then holds the SM90 kernels' blob (``awq_blob``, a non-persistent buffer ``blob``) instead of ``qweight`` and runs
    ``awq_blob_linear``. Measured on an H100 (docs/layers.md, session 42), GPU memory held as a multiple of qweight's
    bytes: 1.18x (1.30x once fp16 calls ran at both <= 512 and more tokens) against 2.1x for the checkpoint layout
    after 1-4 tokens and 3.2-3.4x after more (2.2-2.3x on 8192^2); the time 1.00x from 16 tokens on, 0.98-1.09x at
    1-4. The state dict is the same in both: its ``qweight`` is rebuilt from the blob (exact), and a loaded
    ``qweight`` is turned into the blob."""

    WEIGHT_LAYOUTS = ("checkpoint", "sm90_blob")

    def __init__(self, in_features: int, out_features: int, group_size: int = 128, bias: bool = True,
                 dtype: torch.dtype = torch.float16, device=None):
        super().__init__(in_features, out_features, bias, dtype, device)
        if dtype not in _HALF:
            raise TypeError(f"dtype must be torch.float16 or torch.bfloat16 (AWQ scales and x); got {dtype}")
        if out_features % 8:
            raise ValueError(f"out_features = {out_features} must be a multiple of 8 (8 int4 per int32)")
        group_size = in_features if group_size == -1 else _positive("group_size", group_size)
        if in_features % group_size:
            raise ValueError(f"group_size = {group_size} must divide in_features = {in_features}")
        self.group_size = group_size
        groups = in_features // group_size
        self.register_buffer("qweight", torch.zeros(in_features, out_features // 8, dtype=torch.int32, device=device))
        self.register_buffer("qzeros", torch.zeros(groups, out_features // 8, dtype=torch.int32, device=device))
        self.register_buffer("scales", torch.zeros(groups, out_features, dtype=dtype, device=device))
        self.weight_layout = "checkpoint"

    def extra_repr(self) -> str:
        layout = "" if self.weight_layout == "checkpoint" else f", weight_layout={self.weight_layout}"
        return f"{super().extra_repr()}, group_size={self.group_size}, dtype={self.scales.dtype}{layout}"

    def set_weight_layout_(self, layout: str) -> "AwqLinear":
        """Hold the weight as ``layout`` (``WEIGHT_LAYOUTS``), in place; returns the layer. ``"sm90_blob"`` needs
        in_features a multiple of 8 and group_size 32 or a multiple of 64 (the SM90 kernels' rule); its forward runs
        on SM90 GPUs only. Converting costs a few ms per layer on a GPU (a chunked permutation of the codes)."""
        if layout not in self.WEIGHT_LAYOUTS:
            raise ValueError(f"layout must be one of {self.WEIGHT_LAYOUTS}; got {layout!r}")
        if layout == self.weight_layout:
            return self
        if layout == "sm90_blob":
            _check_blob_layout(self.in_features, self.group_size)
            blob = _awq_blob(self._buffers.pop("qweight"))
            self.register_buffer("blob", blob, persistent=False)
        else:
            self.register_buffer("qweight", self.checkpoint_qweight(), persistent=True)
            del self._buffers["blob"]
        self.weight_layout = layout
        return self

    def checkpoint_qweight(self) -> torch.Tensor:
        """AutoAWQ's qweight: the buffer, or in the ``"sm90_blob"`` layout rebuilt from the blob (a new tensor)."""
        if self.weight_layout == "checkpoint":
            return self.qweight
        return _awq_blob_to_qweight(self.blob, self.in_features, self.out_features)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.weight_layout == "sm90_blob":
            destination[prefix + "qweight"] = self.checkpoint_qweight()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "qweight"
        if self.weight_layout == "sm90_blob" and key in state_dict:
            # popped as torch's own quantized modules do with their extra keys: the rest loads as usual
            qweight = state_dict.pop(key)
            shape = (self.in_features, self.out_features // 8)
            if not isinstance(qweight, torch.Tensor) or qweight.dtype != torch.int32 or tuple(qweight.shape) != shape:
                got = (f"{str(qweight.dtype).replace('torch.', '')} {list(qweight.shape)}"
                       if isinstance(qweight, torch.Tensor) else type(qweight).__name__)
                error_msgs.append(f"{key}: must be an int32 tensor {list(shape)} (AutoAWQ's qweight); got {got}")
            else:
                with torch.no_grad():
                    self.blob.copy_(_awq_blob(qweight.to(self.blob.device)))
        elif self.weight_layout == "sm90_blob" and strict:
            missing_keys.append(key)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 128, dtype: Optional[torch.dtype] = None):
        """Quantize ``linear.weight`` with ``formats.awq.awq_quantize`` (min/max per group, no activation-aware
        scaling)."""
        dtype = dtype or (linear.weight.dtype if linear.weight.dtype in _HALF else torch.float16)
        layer = cls(linear.in_features, linear.out_features, group_size, linear.bias is not None, dtype,
                    linear.weight.device)
        qweight, qzeros, scales = awq_quantize(linear.weight.detach().t(), layer.group_size, scale_dtype=dtype)
        with torch.no_grad():
            layer.qweight.copy_(qweight)
            layer.qzeros.copy_(qzeros)
            layer.scales.copy_(scales)
            cls._copy_bias(layer, linear)
        return layer

    @classmethod
    def from_autoawq(cls, module: nn.Module):
        """The same layer from an AutoAWQ ``WQLinear_GEMM`` (or anything with its attributes): its tensors, shared,
        not copied."""
        _check_autoawq_module(module)
        layer = cls(module.in_features, module.out_features, module.group_size, module.bias is not None,
                    module.scales.dtype, module.qweight.device)
        for name in ("qweight", "qzeros", "scales", "bias"):
            if getattr(module, name) is not None:
                setattr(layer, name, getattr(module, name))
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(self, x)
        if self.weight_layout == "sm90_blob":
            op = torch.ops.cute_kernels.awq_blob_linear if _compiling() else _awq_blob_linear
            return op(x, self.blob, self.scales, self.qzeros, self.bias)
        op = torch.ops.cute_kernels.awq_linear if _compiling() else _awq_linear
        return op(x, self.qweight, self.scales, self.qzeros, self.bias)


def replace_autoawq_linears_(model: nn.Module, weight_layout: str = "checkpoint",
                             classes: tuple = ("WQLinear_GEMM",)) -> int:
    """Swap every AutoAWQ GEMM-layout linear module of ``model`` (a module whose class name is in ``classes``) for
    an ``AwqLinear`` sharing its tensors (``from_autoawq``), in ``weight_layout``; returns how many were swapped.
    Every module is checked first (a refusal names it and leaves the model as it was), then swapped one at a time:
    with ``"sm90_blob"`` a module's qweight is freed (unless the caller holds it elsewhere) before the next blob is
    built, so the peak above the end state is the chunked build's temporaries whatever the model's size (H100: ~190
    MB over 16 x 8192^2 and 32 x 14336 x 4096 modules, 20-30 ms per module). Other AutoAWQ kernels' modules (GEMV,
    Marlin, Exllama) pack differently and are not in ``classes``."""
    if weight_layout not in AwqLinear.WEIGHT_LAYOUTS:
        raise ValueError(f"weight_layout must be one of {AwqLinear.WEIGHT_LAYOUTS}; got {weight_layout!r}")
    if type(model).__name__ in classes:
        raise ValueError("model is itself an AutoAWQ linear module: use AwqLinear.from_autoawq(model)")
    names = [name for name, m in model.named_modules() if type(m).__name__ in classes]
    for name in names:  # every module checked before the first is swapped: a refusal leaves the model as it was
        module = model.get_submodule(name)
        try:
            _check_autoawq_module(module)
            if weight_layout == "sm90_blob":
                _check_blob_layout(module.in_features,
                                   module.in_features if module.group_size == -1 else module.group_size)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    module = None  # no reference of ours keeps a swapped module's tensors alive
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        layer = AwqLinear.from_autoawq(getattr(parent, child))
        setattr(parent, child, layer)  # drops the model's reference to the AutoAWQ module
        layer.set_weight_layout_(weight_layout)
    return len(names)


def set_awq_weight_layout_(model: nn.Module, layout: str) -> int:
    """``AwqLinear.set_weight_layout_(layout)`` on every AwqLinear of ``model``; returns how many there were. Every
    layer is checked first: one that cannot take the layout raises (its name in the message) with the model as it
    was."""
    if layout not in AwqLinear.WEIGHT_LAYOUTS:
        raise ValueError(f"layout must be one of {AwqLinear.WEIGHT_LAYOUTS}; got {layout!r}")
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, AwqLinear)]
    if layout == "sm90_blob":
        for name, layer in layers:
            try:
                _check_blob_layout(layer.in_features, layer.group_size)
            except ValueError as e:
                raise ValueError(f"{name or 'model'}: {e}") from None
    for _, layer in layers:
        layer.set_weight_layout_(layout)
    return len(layers)


class QuantizedLinear(_QuantizedLinear):
    """1/2/4/8-bit weight-only linear layer (``quantized_mm``): ``w_packed`` uint8 [N, K * bits / 8] (formats.bitpack),
    optional float32 ``group_scales`` [N, K / group_size], the per-tensor ``scale`` (a Python float, saved in the
    state dict's extra state), ``bias`` [N] in ``dtype``. x: fp16 / bf16 / fp32; out in x's dtype."""

    def __init__(self, in_features: int, out_features: int, bits: int, group_size: Optional[int] = None,
                 bias: bool = True, dtype: torch.dtype = torch.bfloat16, device=None):
        super().__init__(in_features, out_features, bias, dtype, device)
        self.bits = check_bits(bits)
        if (in_features * bits) % 8:
            raise ValueError(f"in_features = {in_features} must fill whole bytes at {bits} bits")
        if group_size is not None and (_positive("group_size", group_size) % 32 or in_features % group_size):
            raise ValueError(f"group_size must be None or a multiple of 32 that divides in_features = {in_features}; "
                             f"got {group_size}")
        self.group_size = group_size
        self.scale = 1.0
        self.register_buffer("w_packed", torch.zeros(out_features, in_features * bits // 8, dtype=torch.uint8,
                                                     device=device))
        self.register_buffer("group_scales", None if group_size is None else
                             torch.ones(out_features, in_features // group_size, dtype=torch.float32, device=device))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, bits={self.bits}, group_size={self.group_size}"

    def get_extra_state(self) -> dict:
        return {"scale": self.scale}

    def set_extra_state(self, state: dict) -> None:
        self.scale = float(state["scale"])

    @classmethod
    def from_linear(cls, linear: nn.Linear, bits: int, group_size: Optional[int] = None,
                    dtype: Optional[torch.dtype] = None):
        """Quantize ``linear.weight`` with ``formats.bitpack.quantize_weights`` (symmetric, max-abs scales)."""
        dtype = dtype or linear.weight.dtype
        layer = cls(linear.in_features, linear.out_features, bits, group_size, linear.bias is not None, dtype,
                    linear.weight.device)
        w_packed, scale, group_scales = quantize_weights(linear.weight.detach(), bits, group_size)
        with torch.no_grad():
            layer.w_packed.copy_(w_packed)
            if group_scales is not None:
                layer.group_scales.copy_(group_scales)
            cls._copy_bias(layer, linear)
        layer.scale = scale
        return layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(self, x)
        op = torch.ops.cute_kernels.quantized_mm if _compiling() else _quantized_mm
        out = op(x.reshape(-1, self.in_features), self.w_packed, self.scale, self.bits, self.group_scales, None,
                 bias=self._bias_for(x.dtype))  # the bias in the kernel's epilogue
        return out.reshape(*x.shape[:-1], self.out_features)


class _ActivationQuantizedLinear(_QuantizedLinear):
    """Int8Linear / Fp8Linear: the weight quantized by ``_quantize_weight`` into the buffers ``_weight_buffers`` (codes,
    scales); each call quantizes x too, in ``_matmul``. x: fp16 / bf16, out in x's dtype."""

    _weight_buffers: tuple[str, str]

    @staticmethod
    def _quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    @classmethod
    def from_linear(cls, linear: nn.Linear, dtype: Optional[torch.dtype] = None, **options):
        """Quantize ``linear.weight`` with the layer's weight quantizer (see the class); ``options``: the class's
        own constructor options."""
        dtype = dtype or (linear.weight.dtype if linear.weight.dtype in _HALF else torch.bfloat16)
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None, dtype, linear.weight.device,
                    **options)
        with torch.no_grad():
            for name, t in zip(cls._weight_buffers, cls._quantize_weight(linear.weight.detach())):
                getattr(layer, name).copy_(t)
            cls._copy_bias(layer, linear)
        layer._weights_loaded()
        return layer

    @staticmethod
    def _check_extents(in_features: int, out_features: int, k_multiple: int, why: str) -> None:
        if in_features % k_multiple or out_features % 8:
            raise ValueError(f"in_features must be a multiple of {k_multiple} ({why}) and out_features of 8 (16-byte "
                             f"output rows); got {in_features}, {out_features}")

    def _weights_loaded(self) -> None:
        """Rebuild what derives from the weight buffers (nothing here; Int8Linear's zero-point sums)."""

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a per-channel scale stored as a column, [N, 1] (compressed-tensors / vLLM checkpoints), loads as [N]
        key, own = prefix + "weight_scale", getattr(self, "weight_scale", None)
        given = state_dict.get(key)
        if (own is not None and isinstance(given, torch.Tensor) and own.dim() == 1
                and tuple(given.shape) == (own.shape[0], 1)):
            state_dict[key] = given.reshape(-1)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(self, x)
        if x.dtype not in _HALF:
            raise TypeError(f"x must be float16 or bfloat16 (the output's dtype); got {x.dtype}")
        if not _compiling() and needs_grad(x):  # quantized activations: no gradient to x (autograd.py)
            return record(type(self).__name__, lambda: self(x.detach()), ("x",), (x,), {})
        out = self._matmul(x.reshape(-1, self.in_features), torch.ops.cute_kernels if _compiling() else None)
        return out.reshape(*x.shape[:-1], self.out_features)

    def _matmul(self, x2: torch.Tensor, ops) -> torch.Tensor:
        """[M, out_features] from x2 [M, in_features]; ``ops``: the torch.ops namespace under torch.compile, else
        None (the plain functions)."""
        raise NotImplementedError


class Int8Linear(_ActivationQuantizedLinear):
    """W8A8 linear layer (``int8_scaled_mm``): ``weight`` int8 [N, K], ``weight_scale`` float32 [N] (one per output
    channel, symmetric max-abs), ``bias`` [N]; each call quantizes x per token (``per_token_quant_int8``) and the
    kernel's epilogue applies both scales and the bias.

    ``activations="asymmetric"``: x is quantized per token with a zero point too (x ~= (q - azp) * scale: the whole
    int8 range covers each row's [min, max], which suits activations that are not centred on zero, e.g. after a
    GELU), and the epilogue subtracts ``azp[i] * azp_adj[j]``, ``azp_adj`` being the weight's row sums. Those sums
    are a buffer derived from ``weight`` (not in the state dict): rebuilt after ``load_state_dict`` and whenever
    the weight's version counter moves (eager calls); after a write the counter does not see (``weight.data``
    copies, see ``clear_weight_caches``), and before compiled calls after any in-place write to ``weight`` (a
    compiled graph reads the buffer as it is), call ``refresh_zero_point_sums()``."""

    _weight_buffers = ("weight", "weight_scale")
    _quantize_weight = staticmethod(quantize_int8_rowwise)
    ACTIVATIONS = ("symmetric", "asymmetric")

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype: torch.dtype = torch.bfloat16,
                 device=None, activations: str = "symmetric"):
        super().__init__(in_features, out_features, bias, dtype, device)
        self._check_extents(in_features, out_features, 16, "16-byte rows")
        if activations not in self.ACTIVATIONS:
            raise ValueError(f"activations must be one of {self.ACTIVATIONS}; got {activations!r}")
        self.activations = activations
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.ones(out_features, dtype=torch.float32, device=device))
        if activations == "asymmetric":
            self.register_buffer("azp_adj", torch.zeros(out_features, dtype=torch.int32, device=device),
                                 persistent=False)
            self._summed = None  # _weight_key() of the weight azp_adj was summed from
            self.register_load_state_dict_post_hook(_weights_loaded_hook)

    def extra_repr(self) -> str:
        return super().extra_repr() + (", activations=asymmetric" if self.activations == "asymmetric" else "")

    def _weights_loaded(self) -> None:
        self.refresh_zero_point_sums()

    def _weight_key(self) -> tuple:
        """What identifies the weight's contents: its storage and version counter (inference tensors have none; an
        inference-mode weight cannot be written in place outside inference mode either)."""
        w = self.weight
        return w.data_ptr(), w.device, None if w.is_inference() else w._version

    @torch.no_grad()
    def refresh_zero_point_sums(self) -> None:
        """azp_adj = the weight's rows summed over K, in int32 (asymmetric activations only). A new tensor, not a
        copy into the old one: after ``load_state_dict(..., assign=True)`` of a layer built on the meta device the
        buffer must follow the weight's device."""
        if self.activations == "asymmetric":
            self.azp_adj = self.weight.sum(1, dtype=torch.int32)
            self._summed = self._weight_key()

    def _matmul(self, x2, ops):
        gemm = ops.int8_scaled_mm if ops else _int8_scaled_mm
        bias = self._bias_for(x2.dtype)
        if self.activations == "symmetric":
            q, scale = ops.per_token_quant_int8(x2) if ops else per_token_quant_int8(x2)
            return gemm(q, self.weight.t(), scale, self.weight_scale, bias, x2.dtype)
        if not ops and self._summed != self._weight_key():
            self.refresh_zero_point_sums()
        q, scale, azp = ops.per_token_quant_int8_azp(x2) if ops else per_token_quant_int8(x2, symmetric=False)
        return gemm(q, self.weight.t(), scale, self.weight_scale, bias, x2.dtype, azp_adj=self.azp_adj, azp=azp)


def _weights_loaded_hook(module: "_ActivationQuantizedLinear", incompatible_keys) -> None:
    """``load_state_dict`` post-hook (module level, so that the layer pickles)."""
    module._weights_loaded()


class Fp8Linear(_ActivationQuantizedLinear):
    """DeepSeek-V3 FP8 linear layer (``fp8_blockwise_scaled_mm``, groupwise): ``weight`` float8_e4m3fn [N, K] and
    ``weight_scale_inv`` float32 [ceil(N/128), K/128] (128 x 128 blocks, w = q * scale, the checkpoint convention),
    ``bias`` [N]; each call quantizes x per token in 1 x 128 groups (``per_token_group_quant_fp8``, whose scale comes
    in the layout the GEMM stages by TMA). K a multiple of 128, N of 8."""

    _weight_buffers = ("weight", "weight_scale_inv")
    _quantize_weight = staticmethod(lambda w: quantize_fp8_blockwise(w, 128))

    def __init__(self, in_features: int, out_features: int, bias: bool = False, dtype: torch.dtype = torch.bfloat16,
                 device=None):
        super().__init__(in_features, out_features, bias, dtype, device)
        self._check_extents(in_features, out_features, 128, "the scale blocks")
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn,
                                                   device=device))
        self.register_buffer("weight_scale_inv", torch.ones(-(-out_features // 128), in_features // 128,
                                                            dtype=torch.float32, device=device))

    def _matmul(self, x2, ops):
        bias = self._bias_for(x2.dtype)  # added in the kernel's epilogue
        if ops:
            a, a_scale = ops.per_token_group_quant_fp8(x2, 128)
            return ops.fp8_blockwise_scaled_mm(a, self.weight, a_scale, self.weight_scale_inv, x2.dtype, None, bias)
        a, a_scale = per_token_group_quant_fp8(x2, 128)
        return _fp8_blockwise_scaled_mm(a, self.weight, a_scale, self.weight_scale_inv, x2.dtype, bias=bias)


class Fp8RowwiseLinear(_ActivationQuantizedLinear):
    """Per-channel FP8 linear layer (``fp8_scaled_mm``): ``weight`` float8_e4m3fn [N, K] and ``weight_scale`` float32
    [N] (w = q * scale, one max-abs scale per output channel; a checkpoint's ``[N, 1]`` column loads too), ``bias``
    [N]; each call quantizes x per token (``per_token_quant_fp8``) and the kernel's epilogue applies both scales and
    the bias. The layout of vLLM's / llm-compressor's "FP8-dynamic" checkpoints. The K sum is not promoted (as in
    vLLM's FP8 kernels: ``fp8_scaled_mm``'s docstring). K a multiple of 16, N of 8."""

    _weight_buffers = ("weight", "weight_scale")
    _quantize_weight = staticmethod(quantize_fp8_rowwise)

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype: torch.dtype = torch.bfloat16,
                 device=None):
        super().__init__(in_features, out_features, bias, dtype, device)
        self._check_extents(in_features, out_features, 16, "16-byte rows")
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn,
                                                   device=device))
        self.register_buffer("weight_scale", torch.ones(out_features, dtype=torch.float32, device=device))

    def _matmul(self, x2, ops):
        bias = self._bias_for(x2.dtype)  # added in the kernel's epilogue
        if ops:
            a, a_scale = ops.per_token_quant_fp8(x2)
            return ops.fp8_scaled_mm(a, self.weight.t(), a_scale, self.weight_scale, bias, x2.dtype)
        a, a_scale = per_token_quant_fp8(x2)
        return _fp8_scaled_mm(a, self.weight.t(), a_scale, self.weight_scale, bias, x2.dtype)
