"""CPU tier of the SM80-class int8 GEMM: every table config compiles for its own arch (no GPU), and its SASS has the
int8 tensor-core MMA, the async copies, ldmatrix and no local-memory spills; plus the host-side tables and the
split-K decision.
"""

import collections
import os
import re
import struct
import subprocess

import pytest
import torch

from cutlass.base_dsl.enums import Arch

from cute_kernels.sm80 import configs as cfgs
from cute_kernels.sm80.configs import Sm80TileConfig, all_configs, normalize_arch, select_config
from cute_kernels.sm80 import run_int8_scaled_mm_sm80
from cute_kernels.sm80.launch import build_kernel, table_arch
from cute_kernels.sm80.split_k import MAX_SPLIT_K, choose_split_k, normalize_split_k

ARCHS = ("sm_80", "sm_86", "sm_89")
NVDISASM = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "cu13", "bin", "nvdisasm")


def _cubin_registers(cubin: bytes) -> dict:
    """{kernel: registers per thread}: a cubin's `.text.<kernel>` section header keeps them in sh_info bits 24-31."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]

    def name(off):
        return cubin[names_at + off:cubin.index(b"\0", names_at + off)].decode()

    return {name(s[0])[6:]: s[7] >> 24 for s in sections if name(s[0]).startswith(".text.")}


def _sass_opcodes(cubin: bytes, tmp_path) -> collections.Counter:
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    sass = subprocess.run([NVDISASM, "-c", str(path)], capture_output=True, text=True, check=True).stdout
    return collections.Counter(re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass, re.M))


def _arch_configs():
    """Each table config in both builds (plain, split-K) on sm_80; sm_86 and sm_89 share one table, so each build
    is checked once per config on one of them (the SASS of the two targets differs little; compile time is CI's)."""
    cases = []
    for arch, splits in (("sm_80", (False, True)), ("sm_86", (False,)), ("sm_89", (True,))):
        for c in all_configs(arch):
            cases += [pytest.param(arch, c, s, id=f"{arch}-{c.name}-{'splitk' if s else 'plain'}") for s in splits]
    return cases


@pytest.mark.skipif(not os.path.exists(NVDISASM), reason="needs nvdisasm >= 13.4 (nvidia-cuda-nvdisasm wheel)")
@pytest.mark.parametrize("arch,config,split_k", _arch_configs())
def test_config_compiles_to_imma_without_spills(arch, config, split_k, tmp_path):
    # The heaviest epilogue (per-token, per-channel, bias) bounds the register pressure of the lighter ones.
    # --dump-dir: without it --keep-cubin also writes the cubin into the working directory.
    fn = build_kernel(arch, config, torch.bfloat16, "vector", "vector", True, split_k,
                      options=f"--keep-cubin --dump-dir {tmp_path}")
    cubin = fn.artifacts.CUBIN
    ops = _sass_opcodes(cubin, tmp_path)
    (regs,) = _cubin_registers(cubin).values()
    wm, wn = config.tile_m // config.warps_m, config.tile_n // config.warps_n
    imma = sum(v for k, v in ops.items() if k.startswith("IMMA.16832.S8.S8"))
    # One k-tile of the mainloop is fully unrolled: (warp tile / 16x8) atoms x (tile_k / 32) k-blocks, at least once.
    assert imma >= (wm // 16) * (wn // 8) * (config.tile_k // 32), ops
    assert not any(k.startswith("IMMA") and ".U8" in k for k in ops), "unsigned int8 MMA emitted"
    assert any(k.startswith("LDGSTS") and k.endswith(".128") for k in ops), "no 16-byte cp.async"
    assert any(k.startswith("LDSM") for k in ops), "no ldmatrix"
    assert any(k.startswith("RED") for k in ops) == split_k, "split-K red.add present iff split-K build"
    spills = {k: v for k, v in ops.items() if k.startswith(("STL", "LDL"))}
    assert not spills, f"local-memory spills: {spills}"
    assert regs <= 255
    # The occupancy estimate the split-K heuristic uses must not undercount the real registers by much.
    assert regs <= config.regs_per_thread_estimate() + 16, (regs, config.regs_per_thread_estimate())


def test_tables_are_valid_for_their_arch():
    for arch in cfgs.SUPPORTED_ARCHS:
        for c in all_configs(arch):
            c.validate(arch)
    small = [c for c in all_configs("sm_86") + all_configs("sm_89")]
    assert all(c.smem_bytes <= 100 * 1024 and 3 <= c.stages <= 5 for c in small)
    assert all(5 <= c.stages <= 6 for c in all_configs("sm_80") if c.tile_m * c.tile_n <= 128 * 128)


@pytest.mark.parametrize("arch", ARCHS)
def test_buckets(arch):
    assert select_config(arch, 1, 4096).tile_m == 16
    assert select_config(arch, 16, 4096).tile_m == 16
    assert select_config(arch, 17, 4096).tile_m == 32
    assert select_config(arch, 64, 4096).tile_m == 64
    assert select_config(arch, 128, 4096) == select_config(arch, 100, 14336)
    assert select_config(arch, 4096, 4096).tile_n == 256
    assert select_config(arch, 4096, 1024).tile_n == 128


def test_invalid_config_is_named():
    with pytest.raises(ValueError, match="tile_k must be 64 or 128"):
        Sm80TileConfig(128, 128, 32, 2, 2, 4).validate()
    with pytest.raises(ValueError, match="exceeds the sm_86 per-block limit"):
        Sm80TileConfig(128, 256, 128, 2, 4, 4).validate("sm_86")


def test_arch_names():
    assert normalize_arch("sm80") == normalize_arch("80") == normalize_arch("sm_80a") == "sm_80"
    assert cfgs.table_arch_for_capability((8, 9)) == "sm_89"
    assert cfgs.table_arch_for_capability((9, 0)) == "sm_80"
    with pytest.raises(ValueError, match="sm_75 .*cannot compile for it.*Supported: sm_80"):
        normalize_arch("sm_75")
    with pytest.raises(ValueError, match="sm_75"):
        cfgs.table_arch_for_capability((7, 5))
    with pytest.raises(ValueError, match="no SM80-class int8 config table"):
        normalize_arch("sm_100")


def test_table_arch_for_forced_runs():
    assert table_arch("sm_90a") == table_arch("sm_100a") == table_arch("sm80") == "sm_80"
    assert table_arch("sm_89") == "sm_89"
    with pytest.raises(ValueError, match="sm_75"):
        table_arch("sm_75")


def test_foreign_config_type_is_rejected():
    from cute_kernels.configs import TileConfig

    a, b = torch.zeros(16, 64, dtype=torch.int8), torch.zeros(64, 8, dtype=torch.int8)
    scale, out = torch.ones(1), torch.empty(16, 8, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="must be a cute_kernels.sm80.Sm80TileConfig; got TileConfig"):
        run_int8_scaled_mm_sm80(a, b, scale, scale, None, out, config=TileConfig())


def test_fp32_output_is_refused_by_name():
    a, b = torch.zeros(16, 64, dtype=torch.int8), torch.zeros(64, 8, dtype=torch.int8)
    scale, out = torch.ones(1), torch.empty(16, 8, dtype=torch.float32)
    with pytest.raises(TypeError, match="float16 or torch.bfloat16 output; got out of dtype torch.float32"):
        run_int8_scaled_mm_sm80(a, b, scale, scale, None, out)


def test_dsl_still_cannot_target_sm75():
    # The sm_75 error message claims this; if a DSL upgrade adds Turing, revisit the message (and maybe add a path).
    assert "sm_75" not in Arch.__members__ and "sm_80" in Arch.__members__


# (M, N, K, L, arch, num_sms) -> expected slices; num_sms/arch as on A100, L40 and H100 (forced sm_80 tables).
SPLIT_K_TABLE = [
    # decode: a 16x64 tile grid of N/64 CTAs cannot fill the GPU -> split K
    ((1, 4096, 4096, 1, "sm_80", 108), 3),
    ((16, 4096, 14336, 1, "sm_80", 108), 3),
    ((16, 4096, 4096, 1, "sm_90", 132), 6),
    ((32, 14336, 4096, 1, "sm_90", 132), 1),
    ((1, 4096, 14336, 1, "sm_89", 142), 4),
    # M = 128: a 128x128 tile's int32 partials are heavy next to the weight; the traffic cap limits the split
    ((128, 4096, 4096, 1, "sm_80", 108), 1),
    ((128, 4096, 14336, 1, "sm_90", 132), 4),
    ((32, 4096, 4096, 1, "sm_90", 132), 4),
    # the tile grid already fills the GPU
    ((1024, 4096, 4096, 1, "sm_80", 108), 1),
    ((4096, 14336, 4096, 1, "sm_90", 132), 1),
    ((8192, 8192, 8192, 1, "sm_80", 108), 1),
    # too little K to split
    ((16, 4096, 256, 1, "sm_80", 108), 1),
    ((16, 4096, 1024, 1, "sm_80", 108), 2),
    # the batch fills the GPU
    ((16, 4096, 4096, 8, "sm_80", 108), 1),
]


@pytest.mark.parametrize("case,expected", SPLIT_K_TABLE, ids=[str(c[0][:5]) for c in SPLIT_K_TABLE])
def test_split_k_decision(case, expected):
    m, n, k, batch, arch, sms = case
    table_arch = "sm_80" if arch == "sm_90" else arch
    cfg = select_config(table_arch, m, n)
    slices, per = choose_split_k(m, n, k, batch, cfg, sms, arch)
    assert slices == expected
    k_tiles = -(-k // cfg.tile_k)
    assert 1 <= slices <= MAX_SPLIT_K and (slices - 1) * per < k_tiles <= slices * per  # no empty slice


def test_split_k_normalization():
    assert normalize_split_k(5, 33) == (5, 7)
    assert normalize_split_k(16, 17) == (9, 2)  # 16 slices of 17 k-tiles would leave empty slices
    assert normalize_split_k(4, 1) == (1, 1)
    assert normalize_split_k(0, 8) == (1, 8)


@pytest.mark.skipif(not os.path.exists(NVDISASM), reason="needs nvdisasm >= 13.4 (nvidia-cuda-nvdisasm wheel)")
def test_int32_bias_variant_compiles_to_imma_without_spills(tmp_path):
    """The accumulator-bias epilogue ((acc + int32 bias) * scales) on the SM80 kernel: same MMA, no spills."""
    config = select_config("sm_80", 128, 256)
    fn = build_kernel("sm_80", config, torch.bfloat16, "vector", "vector", "acc", True,
                      options=f"--keep-cubin --dump-dir {tmp_path}")
    ops = _sass_opcodes(fn.artifacts.CUBIN, tmp_path)
    assert any(k.startswith("IMMA.16832.S8.S8") for k in ops), ops
    assert not any(k.startswith(("STL", "LDL")) for k in ops)


@pytest.mark.skipif(not os.path.exists(NVDISASM), reason="needs nvdisasm >= 13.4 (nvidia-cuda-nvdisasm wheel)")
@pytest.mark.parametrize("zero_point", ["token", "tensor"])
def test_zero_point_variant_compiles_to_imma_without_spills(zero_point, tmp_path):
    """Asymmetric activations (acc - azp[m] * azp_adj[n] in int32) on the SM80 kernel, split-K build: same MMA, no
    spills."""
    config = select_config("sm_80", 16, 4096)
    fn = build_kernel("sm_80", config, torch.bfloat16, "vector", "vector", True, True,
                      options=f"--keep-cubin --dump-dir {tmp_path}", zero_point=zero_point)
    ops = _sass_opcodes(fn.artifacts.CUBIN, tmp_path)
    assert any(k.startswith("IMMA.16832.S8.S8") for k in ops), ops
    assert not any(k.startswith(("STL", "LDL")) for k in ops)
