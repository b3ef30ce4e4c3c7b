"""SASS inspection of compiled kernels: instruction mix, registers, shared memory, spills.

Works without a GPU: the cubin comes from ``cute.compile`` (``--keep-cubin``), the disassembly from ``nvdisasm``
(the ``nvidia-cuda-nvdisasm`` wheel; the DSL's PTX is 9.4, so nvdisasm >= 13.4 is needed). Registers per thread
live in bits 24-31 of each kernel ``.text`` section's ``sh_info`` in the cubin ELF; shared memory in the size of
its ``.nv.shared`` section (static) - our kernels use dynamic shared memory, reported by the host code instead.
Spills show as local-memory instructions (LDL/STL) in the SASS.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import struct
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


def nvdisasm_path() -> str:
    cands = []
    for base in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        cands.append(Path(base) / "nvidia" / "cu13" / "bin" / "nvdisasm")
    try:
        import nvidia  # namespace package of the CUDA wheels

        for p in getattr(nvidia, "__path__", []):
            cands.append(Path(p) / "cu13" / "bin" / "nvdisasm")
    except ImportError:
        pass
    for c in cands:
        if c.is_file():
            return str(c)
    found = shutil.which("nvdisasm")
    if found:
        return found
    raise FileNotFoundError("nvdisasm not found: pip install 'nvidia-cuda-nvdisasm>=13.4'")


@dataclass
class SassSummary:
    kernels: dict[str, int] = field(default_factory=dict)  # kernel name -> registers per thread
    instructions: collections.Counter = field(default_factory=collections.Counter)  # opcode (no modifiers) -> count
    mma: collections.Counter = field(default_factory=collections.Counter)  # full tensor-core opcodes -> count
    local_memory_ops: int = 0  # LDL/STL: register spills or local arrays
    text: str = ""

    @property
    def spills(self) -> bool:
        return self.local_memory_ops > 0

    def as_dict(self) -> dict:
        return {
            "kernels": self.kernels,
            "registers": max(self.kernels.values(), default=0),
            "local_memory_ops": self.local_memory_ops,
            "tensor_core_ops": dict(self.mma),
            "instruction_mix": dict(self.instructions.most_common()),
            "total_instructions": sum(self.instructions.values()),
        }


_MMA_RE = re.compile(r"\b([IQH]GMMA\.[\w.]+|IMMA\.[\w.]+|HMMA\.[\w.]+|QMMA\.[\w.]+)")
_OPCODE_RE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def _elf_register_counts(cubin: bytes) -> dict[str, int]:
    """Registers per kernel from the ELF section headers (.text.<kernel>: sh_info >> 24)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        return {}
    e_shoff, = struct.unpack_from("<Q", cubin, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    str_off = headers[e_shstrndx][4]

    def name(off):
        end = cubin.index(b"\x00", str_off + off)
        return cubin[str_off + off:end].decode()

    out = {}
    for h in headers:
        n = name(h[0])
        if n.startswith(".text."):
            out[n[len(".text."):]] = h[7] >> 24
    # Kernels compiled with a register cap at entry (setmaxnreg) carry the count in .nv.info's EIATTR_REGCOUNT
    # (attribute 0x2f, value format 0x04: u16 size, u32 symbol index, u32 registers) instead.
    for h in headers:
        if name(h[0]) != ".nv.info":
            continue
        off, end = h[4], h[4] + h[5]
        while off + 4 <= end:
            fmt, attr = cubin[off], cubin[off + 1]
            if fmt == 0x04:
                size, = struct.unpack_from("<H", cubin, off + 2)
                if attr == 0x2F and size == 8 and out:
                    _, regs = struct.unpack_from("<II", cubin, off + 4)
                    for k in out:
                        out[k] = max(out[k], regs)
                off += 4 + size
            else:
                off += 4
    return out


def summarize_cubin(cubin: bytes) -> SassSummary:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        text = subprocess.run([nvdisasm_path(), "-c", path], check=True, capture_output=True, text=True).stdout
    s = SassSummary(kernels=_elf_register_counts(cubin), text=text)
    for line in text.splitlines():
        m = _OPCODE_RE.search(line)
        if not m:
            continue
        op = m.group(1)
        s.instructions[op] += 1
        if op in ("LDL", "STL"):
            s.local_memory_ops += 1
        mm = _MMA_RE.search(line)
        if mm:
            s.mma[mm.group(1)] += 1
    return s


def compile_with_artifacts(compile_fn):
    """Run ``compile_fn(extra_options)`` so that the result keeps its cubin and PTX in ``.artifacts``."""
    with tempfile.TemporaryDirectory() as d:
        return compile_fn(f"--keep-cubin --keep-ptx --dump-dir {d}")
