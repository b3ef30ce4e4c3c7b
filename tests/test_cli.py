"""The command line, run as a user would (no GPU: demo compiles and exports)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, env_extra=None, timeout=300, forced_arch="sm_90a"):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env_extra or {}))
    env.pop("CUTE_DSL_ARCH", None)
    if forced_arch:
        env["CUTE_DSL_ARCH"] = forced_arch
    p = subprocess.run([sys.executable, "-m", "cute_kernels", *args], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_help_for_every_command():
    for cmd in ("info", "demo", "export", "layout", "bench"):
        assert "usage:" in _cli(cmd, "--help")


def test_info(tmp_path):
    out = _cli("info", env_extra={"CUTE_KERNELS_CACHE_DIR": str(tmp_path)})
    assert "nvidia-cutlass-dsl 4.8.1" in out and "sm_90a" in out and str(tmp_path) in out


def test_export_writes_cubin_ptx_sass_manifest(tmp_path):
    _cli("export", "int8_scaled_mm", "--arch", "sm_90a", "--out", str(tmp_path), "--config", "128x64", "--no-bias")
    manifest = json.loads((tmp_path / "int8_scaled_mm.sm_90a.json").read_text())
    assert manifest["config"] == "128x64 cluster 1x1" and manifest["bias"] is False
    assert (tmp_path / "int8_scaled_mm.sm_90a.cubin").read_bytes()[:4] == b"\x7fELF"
    assert ".target sm_90a" in (tmp_path / "int8_scaled_mm.sm_90a.ptx").read_text()
    assert manifest["sass"]["local_memory_ops"] == 0
    assert any(k.startswith("IGMMA.64x64x32") for k in manifest["sass"]["tensor_core_ops"])
    assert "registers/thread" in (tmp_path / "int8_scaled_mm.sm_90a.sass_summary.txt").read_text()


def test_demo_without_gpu_exports(tmp_path):
    out = _cli("demo", "--out", str(tmp_path / "demo"), "--m", "16")
    assert "swap_ab" in out and "IGMMA" in out
    assert (tmp_path / "demo" / "int8_scaled_mm.sm_90a.cubin").exists()


def test_layout_prints_smem_tma_mma_epilogue():
    out = _cli("layout", "--config", "128x256x2x1")
    for needle in ("smem A (staged)", "S<3,4,3>", "TMA box A / B     : (128, 128) / (256, 128)", "epilogue tile",
                   "(64, 256, 32)"):
        assert needle in out, out


def test_layout_of_a_swapped_fp8_config_without_forced_arch():
    # No CUTE_DSL_ARCH: the layouts are traced for sm_90a anyway (the DSL's own default on a GPU-less machine is
    # another arch, which refused the SM90 MMA atoms before session 6).
    out = _cli("layout", "fp8_blockwise_scaled_mm", "--m", "1", "--n", "7168", "--k", "2048", forced_arch=None)
    for needle in ("SFA:", "TMA box A / B     : (64, 128) / (16, 128)", "epilogue tile     : (64, 16)",
                   "schedule          : plain M-fastest tile order"):
        assert needle in out, out


def test_layout_of_the_weight_only_wgmma_kernel():
    out = _cli("layout", "awq_gemm", "--m", "16", "--n", "8192", "--k", "8192", "--x-dtype", "fp16")
    for needle in ("-> wgmma path", "format awq (4-bit)", "config            : 128x16 cluster 1x1 split_k=2",
                   "group parameters  : 2 int32 decode-context word(s) per (row, group of 128); TMA box (128, 2)",
                   "TMA tile B        : (16, 128) elements as 2 boxes of (16, 64)",
                   "TMA tile A        : (2, 512) (64-row blocks, int64 words of one block's K-tiles; issued as 4 boxes",
                   "128 K per stage (2 K-tile(s) of 64)", "smem parameters   : (128,2,"):
        assert needle in out, out
    out = _cli("layout", "quantized_mm", "--bits", "1", "--group", "32", "--m", "64", "--n", "4096", "--k", "4096")
    assert "128 weight rows x 64 tokens x 128 K per stage (2 K-tile(s) of 64)" in out, out
    assert "TMA box (128, 4)" in out, out  # 2 K-tiles of 64 per stage = 4 groups of 32
    out = _cli("layout", "quantized_mm", "--m", "1", "--n", "8192", "--k", "8192")
    assert "-> decode path" in out and "smem A" not in out, out


def test_layout_refuses_what_it_does_not_know():
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUTE_DSL_ARCH="sm_90a")
    for args, msg in ((("layout", "int4_gemm"), "unknown kernel 'int4_gemm'; available: int8_scaled_mm"),
                      (("layout", "quantized_mm", "--bits", "3"), "--bits must be 1, 2, 4 or 8"),
                      (("layout", "quantized_mm", "--config", "128x64x2x1"), "without clusters")):
        p = subprocess.run([sys.executable, "-m", "cute_kernels", *args], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 2 and msg in p.stderr, (args, p.returncode, p.stderr[-2000:])


def test_layout_names_the_schedule_of_a_large_problem():
    out = _cli("layout", "int8_scaled_mm", "--m", "8192", "--n", "8192", "--k", "8192")
    assert "schedule          : swizzled: 4 N clusters at a time, rastering along M" in out, out


import pytest  # noqa: E402


@pytest.mark.parametrize("args,mma", [
    (("int8_scaled_mm", "--arch", "sm_80", "--m", "128"), "IMMA.16832.S8.S8"),
    (("fp8_blockwise_scaled_mm", "--granularity", "128,128,128"), "QGMMA.64x128x32.F32.E4M3.E4M3"),
    (("quantized_mm", "--bits", "2", "--m", "1"), "HMMA.16816.F32"),
    (("awq_gemm", "--m", "4", "--x-dtype", "fp16"), "HMMA.16816.F32"),  # the decode path (WGMMA from 8, session 34)
    # from 17 tokens on sm_90a: the WGMMA kernel (weights decoded into the register A operand)
    (("awq_gemm", "--m", "64", "--x-dtype", "fp16"), "HGMMA.64x64x16.F32"),
    (("quantized_mm", "--bits", "4", "--m", "1000"), "HGMMA.64x256x16.F32.BF16"),
    (("quantized_mm", "--bits", "8", "--m", "200"), "HGMMA.64x128x16.F32.BF16"),  # 8-bit too (session 21)
    # SM80-class GPUs: the mma.sync kernel without SM90's PDL / L2 bulk prefetch (session 51: config.tile_for_arch)
    (("awq_gemm", "--arch", "sm_80", "--m", "64", "--x-dtype", "fp16"), "HMMA.16816.F32"),
    (("quantized_mm", "--arch", "sm_89", "--bits", "4", "--m", "1"), "HMMA.16816.F32.BF16"),
])
def test_export_every_family(tmp_path, args, mma):
    _cli("export", *args, "--out", str(tmp_path))
    (manifest_path,) = tmp_path.glob("*.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["kernel"] == args[0]
    assert any(op.startswith(mma) for op in manifest["sass"]["tensor_core_ops"]), manifest["sass"]
    assert manifest["sass"]["local_memory_ops"] == 0


@pytest.mark.parametrize("m,mma", [("4", "HMMA.16816.F32"), ("64", "HGMMA.64x64x16.F32")])  # decode, WGMMA
def test_export_weight_only_bias_variant(tmp_path, m, mma):
    _cli("export", "awq_gemm", "--m", m, "--x-dtype", "fp16", "--bias", "--out", str(tmp_path))
    (manifest_path,) = tmp_path.glob("*.json")
    manifest = json.loads(manifest_path.read_text())
    assert json.dumps(manifest).count('"bias": true') == 1, manifest
    assert any(op.startswith(mma) for op in manifest["sass"]["tensor_core_ops"]), manifest["sass"]
    assert manifest["sass"]["local_memory_ops"] == 0
    if m == "4":  # the decode tiles read AWQ's repack in fragment order (session 45): the manifest says so
        assert "fragment order" in json.dumps(manifest), manifest


def test_awq_long_k_decode_entry_in_the_clis(tmp_path):
    """8192^2 at one token: awq_gemm runs the decode tile with awq_zmma (config.awq_select_tile, session 52), and the
    layout and export CLIs say and compile the same; at 5 tokens the WGMMA path."""
    shape = ("--n", "8192", "--k", "8192", "--x-dtype", "fp16")
    out = _cli("layout", "awq_gemm", "--m", "1", *shape)
    assert "-> decode path" in out and "decode format     : awq_zmma" in out and "fields_in_place=True" in out, out
    assert "-> wgmma path" in _cli("layout", "awq_gemm", "--m", "5", *shape)
    _cli("export", "awq_gemm", "--m", "1", *shape, "--out", str(tmp_path))
    (manifest_path,) = tmp_path.glob("*.json")
    manifest = json.loads(manifest_path.read_text())
    assert '"format": "awq_zmma"' in json.dumps(manifest) and '"promoted_scales": true' in json.dumps(manifest)
    assert any(op.startswith("HMMA.16816.F32") for op in manifest["sass"]["tensor_core_ops"]), manifest["sass"]


def test_export_dequantize_weights(tmp_path):
    _cli("export", "dequantize_weights", "--bits", "4", "--x-dtype", "fp16", "--out", str(tmp_path))
    (manifest_path,) = tmp_path.glob("*.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["kernel"] == "dequantize_weights" and manifest["bits"] == 4
    assert manifest["sass"]["local_memory_ops"] == 0 and not manifest["sass"]["tensor_core_ops"]


@pytest.mark.parametrize("args,mma,key,value", [
    (("int8_scaled_mm", "--m", "1", "--azp", "token"), "IGMMA", "zero_point", "token"),
    (("int8_scaled_mm", "--arch", "sm_80", "--azp", "tensor"), "IMMA", "zero_point", "tensor"),
    (("fp8_blockwise_scaled_mm", "--m", "128", "--bias"), "QGMMA", "bias", True),
    (("fp8_scaled_mm", "--m", "16"), "QGMMA.64x16x32.F32.E4M3.E4M3", "bias", True),
    (("fp8_blockwise_grouped_mm", "--m", "256", "--groups", "8"), "QGMMA.64x", "groups", 8),
    (("fp8_blockwise_grouped_mm", "--m", "16", "--n", "7168", "--k", "2048"), "QGMMA.64x16x32", "m_max", 16),
    (("fp8_blockwise_grouped_mm_contiguous", "--m", "8192"), "QGMMA.64x", "raster", [1, False]),
])
def test_export_zero_point_and_fp8_bias_variants(tmp_path, args, mma, key, value):
    _cli("export", *args, "--out", str(tmp_path))
    (manifest_path,) = tmp_path.glob("*.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest[key] == value, manifest
    assert any(op.startswith(mma) for op in manifest["sass"]["tensor_core_ops"]), manifest["sass"]
    assert manifest["sass"]["local_memory_ops"] == 0
