"""Stage 5: render the commit-ready CMake toolchain file from the winners."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from compileiq_build import __version__, cmake_dir
from compileiq_build.build.space import dimensions_for
from compileiq_build.decide.selection import NoWinner, Portable, Winner
from compileiq_build.errors import CompileIQError
from compileiq_build.project.manifest import Compiler, Project, c_identifier
from compileiq_build.run.profiler import hot_kernels
from compileiq_build.store.database import Store

DEFAULT_NAME = "compileiq-toolchain.cmake"


@dataclass(frozen=True)
class Provenance:
    date: str  # YYYY-MM-DD
    machine: str  # GPU name(s) or CPU model
    driver: str
    compilers: tuple[tuple[str, str], ...]  # ("CUDA", "NVIDIA 13.0.88"), sorted
    strategy: str


def _machine(env: Mapping[str, Any]) -> tuple[str, str]:
    gpus = env.get("gpus") or []
    if gpus:
        names = sorted({f"{g['name']} (sm_{g['compute_capability'].replace('.', '')})" for g in gpus})
        return "; ".join(names), ", ".join(sorted({g["driver"] for g in gpus}))
    return f"CPU {env.get('cpu', 'unknown')} (no GPU)", "none"


def provenance(envs: Sequence[Mapping[str, Any]], fallback: Mapping[str, Compiler], strategy: str,
               date: str) -> Provenance:
    """From the runs' stored records (environment.describe plus the compilers), one per machine.

    The first record's compilers are the ones the module compares a build's compilers with.
    """
    machines = [_machine(env) for env in envs]
    compilers = envs[0].get("compilers") if envs else None
    if not compilers:
        compilers = {lang: f"{c.id} {c.version}" for lang, c in fallback.items()}
    return Provenance(date, "; ".join(dict.fromkeys(m for m, _ in machines)),
                      ", ".join(dict.fromkeys(d for _, d in machines)),
                      tuple(sorted(compilers.items())), strategy)


def bracket(text: str) -> str:
    """CMake bracket argument: nothing inside it is CMake code, whatever the text."""
    level = 1
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def comment(text: object) -> str:
    """Text safe inside a '#' comment line: no line breaks or control characters."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(text))


# An absolute path in a benchmark's arguments (a data file of the tuning machine's checkout):
# only its file name goes into the committed file.
_ABSOLUTE = re.compile(r"(?<![\w.~])/(?:[^\s/\]=,]+/)*([^\s/\]=,]+)")


def no_paths(text: object) -> str:
    """`comment` text with every absolute path shortened to .../<its last name>."""
    return _ABSOLUTE.sub(r".../\1", comment(text))


def variable_name(target_id: str, language: str, arch_key: str) -> str:
    """As CompileIQ.cmake spells it; anything but [A-Za-z0-9_] becomes '_' (MAKE_C_IDENTIFIER)."""
    name = f"COMPILEIQ_FLAGS_{target_id}_{language}_{arch_key}"
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def code_variable(target_id: str, arch_keys: Mapping[str, str]) -> str:
    """The variable that records the machine code a unit's gains were measured with, for its
    architectures (one per language: sm_90, x86_64)."""
    name = f"COMPILEIQ_CODE_{target_id}_{'_'.join(v for _, v in sorted(arch_keys.items()))}"
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


@dataclass(frozen=True)
class Code:
    """The machine code a winner's gains were measured with: its digest (codeinfo.read_code),
    and the profiled hot kernels that digest covers alone (none: every function)."""

    target: str
    arch_keys: dict[str, str]
    digest: str
    kernels: tuple[str, ...] = ()


def measured_codes(store: Store, project: Project, winners: Sequence[Winner]) -> list[Code]:
    """Each winner's shipped code as the store holds it: the digest of the evaluation whose
    samples give its gains, with the hot kernels (profiling.py) the digest was keyed on."""
    codes = []
    for w in winners:
        digest = store.evaluation(w.evidence).digest if w.evidence else ""
        if not digest:
            continue
        unit = next((t for t in project.targets if t.name == w.target), None)
        kernels: set[str] = set()
        if unit is not None and "CUDA" in w.arch_keys:
            workloads = {b.workload for b in project.benchmarks_for(w.target)}
            rows = [r for r in store.kernel_times(unit.cmake_target, w.arch_keys) if r.workload in workloads]
            kernels = hot_kernels(rows, w.target)
        codes.append(Code(w.target, dict(w.arch_keys), digest, tuple(sorted(kernels))))
    return codes


def source_digest(source_dir: Path, files: Sequence[str]) -> str:
    """The digest of a tuned unit's `files` (relative to `source_dir`) as CompileIQApply.cmake's
    _compileiq_check_sources computes it at configure: sha256 of a line "<path> <sha256 of
    the file>" per file, sorted ("missing" for a file not there)."""
    lines = []
    for rel in sorted(files):
        path = source_dir / rel
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
        lines.append(f"{rel} {digest}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def source_digests(project: Project, units: Iterable[str]) -> dict[str, str]:
    """Unit name -> the digest of its sources as they are now (source_digest), for the units
    whose manifest entry lists their files (older manifests do not)."""
    names = set(units)
    return {t.name: source_digest(project.source_dir, t.files) for t in project.targets
            if t.name in names and t.files}


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("compileiq_build.results", "templates"),
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
    lstrip_blocks=True, autoescape=False,
)
_ENV.filters["bracket"] = bracket
_ENV.filters["comment"] = comment
_ENV.filters["no_paths"] = no_paths


# A CMake list splits at ';', treats '[' ']' as grouping and a '\' before ';' as an
# escape, whatever the quoting: such a flag could not be read back as one element.
# No compiler flag needs them.
_UNLISTABLE = re.compile(r"[;\[\]\x00\r\n]|\\$")


def _host_specific(language: str, flags: Sequence[str]) -> list[str]:
    """The flags that only CPUs like the tuning machine's can run the code of (-march=native)."""
    known = {d.flag(v) for d in dimensions_for(language) if d.host_specific for v in d.values}
    return [f for f in flags if f in known]


def _entries(target: str, flags: Mapping[str, tuple[str, ...]], arch_keys: Mapping[str, str]) -> list[dict]:
    for flag in (f for fl in flags.values() for f in fl):
        if _UNLISTABLE.search(flag):
            raise CompileIQError(f"flag {flag!r} of {target} holds text (; [ ], a line break or "
                                 "a final backslash) that a CMake list cannot hold; it is not written.")
    return [{"target": target, "language": lang, "arch": arch_keys[lang],
             "variable": variable_name(c_identifier(target), lang, arch_keys[lang]),
             "flags": flags[lang], "host_specific": _host_specific(lang, flags[lang])}
            for lang in sorted(flags)]


def render(winners: Sequence[Winner], losers: Sequence[NoWinner], provenance: Provenance,
           portables: Sequence[Portable] = (), codes: Sequence[Code] = (),
           sources: Mapping[str, str] | None = None) -> str:
    """The toolchain file: the flags, the units it decides, the code they were measured with
    (`codes`, for `check`), the digest of each flagged unit's sources (`sources`, unit name ->
    source_digest: a configure warns when they changed), and a copy of CompileIQApply.cmake
    for builds without the package."""
    entries = []
    for w in sorted(winners, key=lambda w: (w.target, sorted(w.arch_keys.items()))):
        entries += _entries(w.target, w.flags, w.arch_keys)
    for p in sorted(portables, key=lambda p: p.target):
        entries += _entries(p.target, p.flags, dict.fromkeys(p.flags, "portable"))
    languages = {e["language"] for e in entries}
    units = sorted({w.target for w in winners} | {n.target for n in losers} | {p.target for p in portables})
    for name in units:
        if _UNLISTABLE.search(name):
            raise CompileIQError(f"the target name {name!r} holds text that a CMake list cannot hold.")
    records = [{"variable": code_variable(c_identifier(c.target), c.arch_keys), "digest": c.digest,
                "kernels": c.kernels} for c in codes]
    return _ENV.get_template("toolchain.cmake.j2").render(
        version=__version__, provenance=provenance, entries=entries,
        tuned_with=[(lang, text) for lang, text in provenance.compilers if lang in languages],
        winners=sorted(winners, key=lambda w: (w.target, sorted(w.arch_keys.items()))),
        portables=sorted(portables, key=lambda p: p.target),
        losers=sorted(losers, key=lambda n: n.target), units=units,
        codes=sorted(records, key=lambda r: r["variable"]), apply_module=_apply_module(),
        sources=sorted((f"COMPILEIQ_SOURCES_{c_identifier(name)}", digest)
                       for name, digest in (sources or {}).items()
                       if name in {e["target"] for e in entries}))


def _apply_module() -> str:
    """CompileIQApply.cmake, as the toolchain file holds it: without its documentation block."""
    text = (cmake_dir() / "CompileIQApply.cmake").read_text(encoding="utf-8")
    return re.sub(r"\A#\[=+\[.*?#\]=+\]\n+", "", text, flags=re.S).rstrip("\n")


def write(path: Path, text: str) -> None:
    """Write atomically, so a crash never leaves half a toolchain file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise _unwritable(path, exc) from None


def check_writable(path: Path) -> None:
    """Before hours of tuning: the toolchain file can be written there (nothing is left behind)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.probe")
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise _unwritable(path, exc) from None


def _unwritable(path: Path, exc: OSError) -> CompileIQError:
    return CompileIQError(f"cannot write the toolchain file {path}: {exc.strerror or exc}. "
                          "Choose a writable place with --output PATH.")
