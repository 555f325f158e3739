"""What a candidate's build produced, read without a GPU: a digest of the generated machine
code (candidates with identical code are the same point and are measured once) and
compile-time features of each kernel, which the model-guided search fits on.

The digest covers the machine code that runs, not whole files: rebuilding the same source
with the same flags in another build tree gives different object files (the temporary file's
name in the symbol table, `tmpxft_<pid>_...`; the ptxas options the fatbinary records) but
identical code.  An object that holds device code counts by its SASS alone (the instructions
and names of its functions, optionally only the profile's hot kernels): the flags tuned for
CUDA sources are device flags, which leave the host code alone.  A kernel-less CUDA object
(main() in a .cu) then adds nothing; one without SASS (-dlto: NVVM IR) counts by its
fatbinary, which nvcc scrambles with the folder it ran in (two trees never share it: the safe
side).  An object with no device code (C++) counts by its host disassembly.

The features come from what is read anyway, with no extra compile: the `cuobjdump -sass`
text behind the digest (the instruction mix: global loads and stores by cache operator,
shared and local memory traffic, arithmetic, branches) and the compiler's resource report
in the build log (registers, spills, stack, shared memory).  Each is named
`<function>:<name>` for one function and `all:<name>` over all of them (sums; registers
the maximum).
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compileiq_build.machine.environment import find_tool

# ptxas at compile time ("Compiling entry function '_Z1kPf' for 'sm_90'", "Function properties
# for _Z1kPf", "... bytes stack frame, ... spill ...", "Used 40 registers, ... bytes smem")
# and, with separable compilation, nvlink at the device link ("Function properties for
# '_Z1kPf': (target: sm_90)", "used 40 registers, ..., 0 stack, ... bytes smem, ... bytes lmem").
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPERTIES = re.compile(r"Function properties for ('?)([^'\s]+)\1:?(?: \(target: (\w+)\))?")
_USED = re.compile(r"[Uu]sed (\d+) registers")
_NVLINK = re.compile(r"(\d+) stack, \d+ bytes smem, .*?(\d+) bytes lmem")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")

# SASS from cuobjdump: keep the kernels' names and instructions. The rest of its output
# differs between candidates with the same code (the ELF records `ptxasOptions = ...`).
_SASS = re.compile(rb"^\s*(/\*[0-9a-f]{4,}\*/|Function : )")
_ARCH = re.compile(rb"^\s*code for (\w+)")
_FUNCTION = re.compile(rb"^\s*Function : (\S+)")
_ELF_CODE = re.compile(rb"^Fatbin elf code:", re.M)  # a cubin: SASS, even of no function
# Kernels end with EXIT; device functions compiled apart (-rdc) return (RET) instead.
_EXIT = re.compile(rb"^\s*/\*[0-9a-f]{4,}\*/\s+(@!?\w+\s+)?EXIT\b", re.M)
# The fatbinary in a CUDA object (-rdc puts it in __nv_relfatbin).
_FATBIN_SECTIONS = (b".nv_fatbin", b"__nv_relfatbin")
# "/*00b0*/  @!P0 LDG.E.CONSTANT R0, ..." -> the predicate and the opcode with its modifiers.
_INSTRUCTION = re.compile(rb"^\s*/\*[0-9a-f]{4,}\*/\s+(@!?\w+\s+)?([A-Z][A-Z0-9_.]*)")

# Opcodes counted (with every modifier), and the cache operators of global loads and
# stores (sm_90 prints -dlcm=cg as LDG.E.STRONG.GPU, cs as .EF, lu as .LU, cv as
# .STRONG.SYS, ca as .STRONG.SM; -dscm=cg/cs/wt/wb as STG.E.STRONG.GPU/.EF/.STRONG.SYS/
# .STRONG.SM; const __restrict__ loads as .CONSTANT; L1 eviction hints as .EF/.EL/.EU/.NA).
_OPCODES = ("LDG", "STG", "LDS", "STS", "LDL", "STL", "LDGSTS", "LDGDEPBAR",
            "FFMA", "FMUL", "FADD", "MUFU", "IMAD", "BRA", "BSSY", "BSYNC")
_CACHE_OPERATORS = {
    "LDG": ("CONSTANT", "EF", "EL", "EU", "LU", "NA", "STRONG.SM", "STRONG.GPU", "STRONG.SYS", "LTC128B"),
    "STG": ("EF", "EL", "EU", "NA", "STRONG.SM", "STRONG.GPU", "STRONG.SYS"),
}
# Every function gets every count, zeros included: a missing feature reads as unknown.
_COUNTS = ("instructions", *(op.lower() for op in _OPCODES),
           *(f"{op.lower()}.{c.lower()}" for op, cs in _CACHE_OPERATORS.items() for c in cs))


# ptxas' (or nvlink's) resource report per (function, arch): registers, spill, stack and smem bytes.
Report = dict[tuple[str, str | None], dict[str, int]]


@dataclass(frozen=True)
class CodeInfo:
    """A build's machine code: its digest ('' without objects) and its features."""

    digest: str
    features: dict[str, float]


def object_files(tree: Path, target: str, sources: Sequence[str] = ()) -> list[Path]:
    """The target's object files in a Ninja build tree (CMakeFiles/<target>.dir/...), or only
    those of `sources` (absolute paths): CMake names an object after its source's path
    relative to the target's folder (`__` for `..`), plus `.o`."""
    found = [p for d in tree.rglob(f"CMakeFiles/{target}.dir") for p in d.rglob("*.o")
             for rel in [p.relative_to(d).as_posix()]
             if not sources or any(object_of(rel, src) for src in sources)]
    return sorted(found)


def object_of(rel: str, source: str) -> bool:
    """Whether an object's path in its target's CMakeFiles/<target>.dir is that of `source`."""
    parts = [part for part in rel.removesuffix(".o").split("/") if part != "__"]
    return Path(source).parts[-len(parts):] == tuple(parts)


def read_code(objects: list[Path], report: Report, kernels: set[str] | None = None) -> CodeInfo:
    """The digest and features of these objects' code, disassembling each object once, with the
    compiler's resource report (`resource_report` of a build log, or `BuildTree.report`: that of
    every build of the tree, since a build that compiled nothing prints none).  Only the
    functions of these objects' SASS count (where there is SASS).

    With `kernels` (mangled names: the profile's hot kernels) the device part of the digest
    covers those kernels' SASS alone, plus the device functions that are compiled apart (-rdc:
    a kernel calls them through a relocation, no name in its SASS); when none of them is in
    these objects (another target's profile, a renamed kernel), every function's.  The
    features always cover every function (hot_features selects)."""
    dumps = [(obj, cuobjdump_sass(obj)) for obj in objects]
    functions = [sass_functions(sass) if sass else [] for _, sass in dumps]
    named = {name for fs in functions for name, _ in fs}
    hot = (kernels or set()) & named
    h = hashlib.sha256()
    counts: dict[tuple[str, str | None], Counter[str]] = {}
    for (obj, sass), fs in zip(dumps, functions, strict=True):
        if sass is None:  # no device code: the host code is what the flags change
            part = b"host\n" + _host_code(obj)
        elif fs or _ELF_CODE.search(sass):  # a cubin: its functions' SASS (none in a .cu without kernels)
            part = b"sass\n" + b"".join(code for name, code in fs if _counts(name, code, hot))
        else:  # no SASS (-dlto objects hold NVVM IR; ptxas runs at the device link)
            part = b"fatbin\n" + _fatbin(obj)
        h.update(obj.name.encode())
        h.update(hashlib.sha256(part).digest())
        for key, c in _instruction_mix(sass or b"").items():
            counts.setdefault(key, Counter()).update(c)
    if named:  # a log names the functions of every unit it compiled, other targets' too
        report = {key: r for key, r in report.items() if not key[0] or key[0] in named}
    return CodeInfo(h.hexdigest() if objects else "", _features(counts, report))


def _counts(name: str, code: bytes, hot: set[str]) -> bool:
    """Whether a function's SASS is in the digest: every function's without hot kernels; else
    the hot kernels' and the device functions' (no EXIT: compiled apart, called by kernels)."""
    return not hot or name in hot or not _EXIT.search(code)


def sass_functions(sass: bytes) -> list[tuple[str, bytes]]:
    """Each function's SASS in cuobjdump's text, (mangled name, its lines), in order: the name,
    the arch it is compiled for and the instructions; nothing else (the file names, the
    recorded options), so that the same code from another build tree reads the same.  Runs of
    blanks count as one: cuobjdump pads its columns to the longest instruction of the whole
    file, so that a change in one function would otherwise change the text of every other."""
    found: list[tuple[str, list[bytes]]] = []
    arch = b""
    for line in sass.splitlines():
        if m := _ARCH.match(line):
            arch = m[1]
        elif m := _FUNCTION.match(line):
            found.append((m[1].decode(), [b"code for " + arch, line.strip()]))
        elif found and _SASS.match(line):
            found[-1][1].append(b" ".join(line.split()))
    return [(name, b"\n".join(lines) + b"\n") for name, lines in found]


def kernels_of(obj: Path) -> set[str]:
    """The (mangled) names of the device functions whose SASS an object holds."""
    sass = cuobjdump_sass(obj) or b""
    return {m[1].decode() for line in sass.splitlines() if (m := _FUNCTION.match(line))}


def code_digest(objects: list[Path]) -> str:
    """A digest of the machine code of these objects ('' when there are none)."""
    return read_code(objects, {}).digest


def code_features(objects: list[Path], build_output: str) -> dict[str, float]:
    """Per-function and total features of the objects' SASS and the log's resource report."""
    return read_code(objects, resource_report(build_output)).features


def sass_features(sass: bytes, build_output: str) -> dict[str, float]:
    """The features of SASS already disassembled (cuobjdump_sass) and of the build log: those
    code_features gives for the object it came from, without disassembling it again."""
    return _features(_instruction_mix(sass), resource_report(build_output))


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None


def cuobjdump_sass(obj: Path) -> bytes | None:
    """`cuobjdump -sass` of an object; None when it has no device code.  Any object may hold
    some: CUDA sources need not end in .cu (LANGUAGE CUDA on a .cpp)."""
    tool = find_tool("cuobjdump")
    if not tool:
        return None
    env = dict(os.environ)
    if nvdisasm := find_tool("nvdisasm"):
        env["NVDISASM_PATH"] = str(Path(nvdisasm).parent)  # cuobjdump -sass runs nvdisasm
    proc = _run([tool, "-sass", str(obj)], env)
    if proc is None or proc.returncode != 0:  # "does not contain device code"
        return None
    return proc.stdout


def _host_code(obj: Path) -> bytes:
    tool = find_tool("objdump")
    proc = _run([tool, "-d", "--no-show-raw-insn", str(obj)]) if tool else None
    if proc is None or proc.returncode != 0:
        return obj.read_bytes()
    # Drop the lines that name the file; keep the code.
    return b"\n".join(line for line in proc.stdout.splitlines()
                      if str(obj).encode() not in line and b"file format" not in line)


def _fatbin(obj: Path) -> bytes:
    """The fatbinary sections of an object (its device code as nvcc embedded it, with the
    options it records), or the whole file when there are none to read."""
    data = obj.read_bytes()
    sections = _elf_sections(data)
    found = b"".join(sections[name] for name in _FATBIN_SECTIONS if name in sections)
    return found or data


def _elf_sections(data: bytes) -> dict[bytes, bytes]:
    """Section name -> contents of a little-endian ELF64 file ({} for anything else)."""
    if data[:6] != b"\x7fELF\x02\x01" or len(data) < 64:
        return {}
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        return {}
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx]
    out: dict[bytes, bytes] = {}
    for name, kind, _, _, offset, size in headers:
        start = names[4] + name
        label = data[start:data.find(b"\0", start)]
        if kind != 8:  # SHT_NOBITS holds nothing in the file
            out[label] = data[offset:offset + size]
    return out


def _instruction_mix(sass: bytes) -> dict[tuple[str, str | None], Counter[str]]:
    """Instruction counts per (function, arch) in cuobjdump's SASS."""
    mix: dict[tuple[str, str | None], Counter[str]] = {}
    arch: str | None = None
    c: Counter[str] = Counter()
    for line in sass.splitlines():
        if m := _ARCH.match(line):
            arch = m[1].decode()
        elif m := _FUNCTION.match(line):
            c = mix.setdefault((m[1].decode(), arch), Counter())
        elif (m := _INSTRUCTION.match(line)) and m[2] != b"NOP" and (m[1] or b"").strip() != b"@!PT":
            opcode = m[2].decode()
            base = opcode.split(".", 1)[0]
            c["instructions"] += 1
            if base in _OPCODES:
                c[base.lower()] += 1
            for operator in _CACHE_OPERATORS.get(base, ()):
                if f".{operator}." in f"{opcode}.":
                    c[f"{base.lower()}.{operator.lower()}"] += 1
    return mix


def resource_report(build_output: str) -> Report:
    """The resource report per (function, arch): registers, spill (nvlink: local memory),
    stack and shared memory bytes.  Device functions that ptxas reports apart (called, not
    inlined) have a stack frame and spills but no registers of their own."""
    report: Report = {}
    entry: tuple[str, str | None] = ("", None)
    current = entry
    for line in build_output.splitlines():
        if m := _ENTRY.search(line):
            entry = current = (m[1], m[2])
        elif m := _PROPERTIES.search(line):
            current = (m[2], m[3] or entry[1])
            if m[1]:  # nvlink names kernels only, and its "used" line follows
                entry = current
        elif m := _FRAME.search(line):
            r = report.setdefault(current, Counter())
            r["stack_bytes"] += int(m[1])
            r["spill_bytes"] += int(m[2]) + int(m[3])
        elif m := _USED.search(line):
            r = report.setdefault(entry, Counter())
            r["registers"] = max(r.get("registers", 0), int(m[1]))
            r["smem_bytes"] += int(s[1]) if (s := _SMEM.search(line)) else 0
            if n := _NVLINK.search(line):
                r["stack_bytes"] += int(n[1])
                r["spill_bytes"] += int(n[2])
    return report


def _features(counts: dict[tuple[str, str | None], Counter[str]], report: Report) -> dict[str, float]:
    keys = list(dict.fromkeys([*counts, *report]))
    several_archs = len({arch for _, arch in keys if arch}) > 1
    features: dict[str, float] = {}
    for name, arch in keys:
        # nvlink does not name the arch when there is one: its report and the SASS meet here.
        label = feature_label(name) + (f"@{arch}" if several_archs and arch else "")
        values = {n: counts[name, arch][n] for n in _COUNTS} if (name, arch) in counts else {}
        for n, v in [*values.items(), *report.get((name, arch), {}).items()]:
            # One name in two objects (a template instantiated in each) is one function here.
            for key in (f"{label}:{n}", f"all:{n}") if name else (f"all:{n}",):  # a report of no name
                old = features.get(key, 0.0)
                features[key] = max(old, float(v)) if n == "registers" else old + v
    if "all:registers" in features:  # the totals' names from before, still read
        features["registers_max"] = features["all:registers"]
        features["spill_bytes"] = features.get("all:spill_bytes", 0.0)
    return features


def hot_features(features: dict[str, float], kernels: set[str]) -> dict[str, float]:
    """The features of these kernels (mangled names) alone, the `all:` totals over them: a
    group's model then sees the code that takes the benchmarks' time.  Unchanged when none
    of them is among the features (another architecture's labels, an empty profile)."""
    labels = {feature_label(k) for k in kernels}
    kept = {k: v for k, v in features.items() if k.split(":", 1)[0].split("@", 1)[0] in labels}
    if not kept:
        return features
    totals: dict[str, float] = {}
    for key, v in kept.items():
        total = "all:" + key.split(":", 1)[1]
        old = totals.get(total, 0.0)
        totals[total] = max(old, v) if total == "all:registers" else old + v
    if "all:registers" in totals:
        totals["registers_max"] = totals["all:registers"]
        totals["spill_bytes"] = totals.get("all:spill_bytes", 0.0)
    return {**kept, **totals}


def feature_label(name: str) -> str:
    """A mangled name as a stable, bounded feature name."""
    return name if len(name) < 60 else f"{name[:40]}~{hashlib.sha1(name.encode()).hexdigest()[:8]}"
