"""What a candidate's build produced, read without a GPU: a digest of the generated machine
code (candidates with identical code are the same point and are measured once) and the
compiler's resource report (registers, spills, shared memory, stack), which the
model-guided search uses as features.

The digest covers the disassembly, not whole files: rebuilding the same source with the
same flags gives different object files (paths, timestamps) but identical SASS.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

from compileiq_build.environment import find_tool

# ptxas at compile time ("Used 40 registers", "... bytes stack frame, ... spill ...") and, with
# separable compilation, nvlink at the device link ("used 40 registers, ..., 0 stack, ...
# bytes smem, ... bytes lmem").
_USED = re.compile(r"[Uu]sed (\d+) registers")
_NVLINK = re.compile(r"(\d+) stack, \d+ bytes smem, .*?(\d+) bytes lmem")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


def object_files(tree: Path, target: str) -> list[Path]:
    """The target's object files in a Ninja build tree (CMakeFiles/<target>.dir/...)."""
    return sorted(p for d in tree.rglob(f"CMakeFiles/{target}.dir") for p in d.rglob("*.o"))


# SASS from cuobjdump: keep the kernels' names and instructions. The rest of its output
# differs between candidates with the same code (the ELF records `ptxasOptions = ...`).
_SASS = re.compile(rb"^\s*(/\*[0-9a-f]{4,}\*/|Function : )")


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _device_code(obj: Path) -> bytes | None:
    """The SASS of an object's device code; None when it has no device code.  Any object may
    hold some: CUDA sources need not end in .cu (LANGUAGE CUDA on a .cpp)."""
    tool = find_tool("cuobjdump")
    if not tool:
        return None
    env = dict(os.environ)
    if nvdisasm := find_tool("nvdisasm"):
        env["NVDISASM_PATH"] = str(Path(nvdisasm).parent)  # cuobjdump -sass runs nvdisasm
    proc = _run([tool, "-sass", str(obj)], env)
    if proc is None or proc.returncode != 0:  # "does not contain device code"
        return None
    sass = [line for line in proc.stdout.splitlines() if _SASS.match(line)]
    # No SASS (-dlto objects hold NVVM IR; ptxas runs at the device link): the whole file,
    # which never calls two different candidates the same.
    return b"\n".join(sass) if sass else obj.read_bytes()


def _host_code(obj: Path) -> bytes:
    tool = find_tool("objdump")
    proc = _run([tool, "-d", "--no-show-raw-insn", str(obj)]) if tool else None
    if proc is None or proc.returncode != 0:
        return obj.read_bytes()
    # Drop the lines that name the file; keep the code.
    return b"\n".join(line for line in proc.stdout.splitlines()
                      if str(obj).encode() not in line and b"file format" not in line)


def _disassemble(obj: Path) -> bytes:
    """Device and host code: a candidate differs when either does."""
    return (_device_code(obj) or b"") + b"\n--host--\n" + _host_code(obj)


def code_digest(objects: list[Path]) -> str:
    """A digest of the machine code of these objects ('' when there are none)."""
    if not objects:
        return ""
    h = hashlib.sha256()
    for obj in objects:
        h.update(obj.name.encode())
        h.update(hashlib.sha256(_disassemble(obj)).digest())
    return h.hexdigest()


def resource_features(build_output: str) -> dict[str, float]:
    """Totals and maxima of the resource report (nvcc --resource-usage) over all kernels."""
    registers = [int(m) for m in _USED.findall(build_output)]
    if not registers:
        return {}
    frames = [tuple(map(int, m)) for m in _FRAME.findall(build_output)]
    linked = [tuple(map(int, m)) for m in _NVLINK.findall(build_output)]
    smem = [int(m) for m in _SMEM.findall(build_output)]
    return {
        "registers_max": float(max(registers)),
        "registers_sum": float(sum(registers)),
        "stack_bytes": float(sum(f[0] for f in frames) + sum(n[0] for n in linked)),
        "spill_bytes": float(sum(f[1] + f[2] for f in frames) + sum(n[1] for n in linked)),
        "smem_bytes": float(sum(smem)),
    }
