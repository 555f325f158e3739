"""Stage 1: read the manifest that CompileIQ.cmake writes at configure time into a `Project`."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compileiq_build.errors import CompileIQError
from compileiq_build.workspace import MANIFEST

SCHEMA = 1
FORMATS = ("auto", "nvbench", "gbench", "csv", "regex", "time")
UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def c_identifier(name: str) -> str:
    """CMake's string(MAKE_C_IDENTIFIER): the form target names take in variable names."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return f"_{ident}" if ident[:1].isdigit() else ident


@dataclass(frozen=True)
class Compiler:
    language: str
    id: str
    version: str
    path: str
    flags: str = ""
    config_flags: str = ""


@dataclass(frozen=True)
class Target:
    """A tuned unit: a CMake target, or a group of its sources (named `<target>:<group>`)."""

    name: str
    id: str  # the name made a C identifier, as in the toolchain's variable names
    type: str
    languages: tuple[str, ...]
    arch_keys: dict[str, str]  # language -> sm_90 / x86_64 / portable
    project_architectures: tuple[str, ...] = ()
    candidate_files: dict[str, Path] = field(default_factory=dict)
    source_counts: dict[str, int] = field(default_factory=dict)  # sources per language (tuning trees)
    applied_flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    cmake_target: str = ""  # the CMake target; a group's differs from its name
    group: str = ""
    sources: tuple[str, ...] = ()  # a group's files (absolute); empty: every source of the target

    def __post_init__(self) -> None:
        if not self.cmake_target:
            object.__setattr__(self, "cmake_target", self.name)


def jit_warning(target: Target, gpu_arch: str) -> str:
    """Why device flags tuned here would not reach the project's own build of `target` on this
    GPU (its released binary carries no machine code for it, so the driver JIT-compiles PTX),
    or '' when they would.  '90' and '90-real' carry sm_90 machine code ('90a' too, for the
    same GPUs); '90-virtual' only PTX."""
    archs = target.project_architectures
    if not archs or not all(a[:1].isdigit() for a in archs):
        return ""  # native is resolved by the module; all and all-major hold every real arch
    real = {re.sub(r"[a-z]*(-real)?$", "", a) for a in archs if not a.endswith("-virtual")}
    if gpu_arch in real:
        return ""
    numbers = sorted({re.sub(r"-(real|virtual)$", "", a) for a in archs})
    only_ptx = gpu_arch in {re.sub(r"[a-z]*-virtual$", "", a) for a in archs if a.endswith("-virtual")}
    built = (f"for CUDA architectures {', '.join(archs)}: {gpu_arch} only as PTX ({gpu_arch}-virtual)"
             if only_ptx else f"for CUDA architecture(s) {', '.join(numbers)}, not for this GPU's {gpu_arch}")
    return (f"{target.name} is built by the project {built}: on this GPU the project's binary runs "
            f"JIT-compiled PTX, and ptxas flags tuned here would not apply. While tuning it is compiled "
            f"for {gpu_arch}-real; add {gpu_arch}-real to its CUDA_ARCHITECTURES so that the tuned flags "
            "reach your builds.")


@dataclass(frozen=True)
class Benchmark:
    """One registration of a benchmark: with its arguments, one workload."""

    name: str
    index: int  # position among all registrations; stable for a given CMakeLists
    executable: str
    executable_target: str
    args: tuple[str, ...]
    targets: tuple[str, ...]
    format: str
    regex: str
    column: str
    unit: str
    higher_is_better: bool
    workdir: str
    timeout: float | None
    labels: tuple[str, ...]
    checksum: str = ""  # regex whose first group is a printed checksum, compared with the baseline's
    output_file: str = ""  # a file the benchmark writes, compared with the baseline's
    tolerance: float | None = None  # relative, for numerics-changing candidates

    @property
    def workload(self) -> str:
        """A readable, stable key: the name plus the arguments."""
        return f"{self.name}[{shlex.join(self.args)}]" if self.args else self.name


@dataclass(frozen=True)
class Project:
    name: str  # the top-level project() of the CMakeLists
    source_dir: Path
    binary_dir: Path
    generator: str
    build_type: str
    cmake_command: str
    make_program: str
    host_key: str
    compilers: dict[str, Compiler]
    targets: tuple[Target, ...]
    benchmarks: tuple[Benchmark, ...]
    candidate_flags: bool
    tuning_arch: str

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name:
                return t
        raise KeyError(name)

    def benchmarks_for(self, target: str) -> list[Benchmark]:
        """The benchmarks that exercise a tuned target; for a group, those that name it in
        TARGETS, else those of its CMake target."""
        named = [b for b in self.benchmarks if target in b.targets]
        cmake = next((t.cmake_target for t in self.targets if t.name == target), target)
        return named or [b for b in self.benchmarks if cmake in b.targets]


def _str(d: dict[str, Any], key: str, where: str) -> str:
    value = d.get(key, "")
    if not isinstance(value, str):
        raise CompileIQError(f"{where}: '{key}' should be a string, got {value!r}")
    return value


def _strs(d: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = d.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CompileIQError(f"{where}: '{key}' should be a list of strings, got {value!r}")
    return tuple(value)


def _number(d: dict[str, Any], key: str, where: str) -> float | None:
    text = _str(d, key, where)
    try:
        return float(text) if text else None
    except ValueError:
        raise CompileIQError(f"{where}: {key} {text!r} is not a number") from None


def _list(d: dict[str, Any], key: str, where: str) -> list[Any]:
    value = d.get(key, [])
    if not isinstance(value, list):
        raise CompileIQError(f"{where}: '{key}' should be a list, got {type(value).__name__}")
    return value


def _obj(d: Any, where: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise CompileIQError(f"{where}: expected a JSON object, got {type(d).__name__}")
    return d


def load_manifest(path: Path) -> Project:
    """Parse a manifest file; every defect becomes a CompileIQError naming the file."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompileIQError(
            f"cannot read {path}: {exc}. Re-run the CMake configure step of this build folder."
        ) from None
    return parse_manifest(raw, str(path))


def parse_manifest(raw: Any, where: str = "manifest") -> Project:
    m = _obj(raw, where)
    schema = m.get("schema")
    if schema != SCHEMA:
        raise CompileIQError(
            f"{where} has manifest schema {schema!r}, this compileiq_build reads schema {SCHEMA}. "
            "Re-configure the build folder with the CompileIQ module of this version "
            "(-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir))."
        )
    compilers = _compilers(m, where)
    targets = tuple(_target(t, f"{where}: targets[{i}]") for i, t in enumerate(_list(m, "targets", where)))
    benchmarks = tuple(_benchmark(b, i, f"{where}: benchmarks[{i}]")
                       for i, b in enumerate(_list(m, "benchmarks", where)))
    source_dir = Path(_str(m, "source_dir", where))
    return Project(
        # Manifests written before project_name was recorded: the source folder's name.
        name=_str(m, "project_name", where) or source_dir.name,
        source_dir=source_dir,
        binary_dir=Path(_str(m, "binary_dir", where)),
        generator=_str(m, "generator", where),
        build_type=_str(m, "build_type", where),
        cmake_command=_str(m, "cmake_command", where),
        make_program=_str(m, "make_program", where),
        host_key=_str(m, "host_key", where),
        compilers=compilers,
        targets=targets,
        benchmarks=benchmarks,
        candidate_flags=bool(m.get("candidate_flags", False)),
        tuning_arch=_str(m, "tuning_arch", where),
    )


def _compilers(m: dict[str, Any], where: str) -> dict[str, Compiler]:
    compilers = {}
    for lang, c in _obj(m.get("compilers", {}), f"{where}: compilers").items():
        c = _obj(c, f"{where}: compilers.{lang}")
        compilers[lang] = Compiler(
            language=lang,
            id=_str(c, "id", where),
            version=_str(c, "version", where),
            path=_str(c, "path", where),
            flags=_str(c, "flags", where),
            config_flags=_str(c, "config_flags", where),
        )
    return compilers


def _target(raw: Any, tw: str) -> Target:
    """One entry of the manifest's targets, its per-language fields gathered per field."""
    t = _obj(raw, tw)
    per_lang = _obj(t.get("per_language", {}), tw)
    arch_keys, files, applied, counts = {}, {}, {}, {}
    project_archs: tuple[str, ...] = ()
    for lang, info in per_lang.items():
        info = _obj(info, f"{tw}.{lang}")
        arch_keys[lang] = _str(info, "arch_key", tw)
        if info.get("candidate_file"):
            files[lang] = Path(_str(info, "candidate_file", tw))
        if isinstance(info.get("sources"), int):
            counts[lang] = info["sources"]
        applied[lang] = _strs(info, "applied_flags", tw)
        if lang == "CUDA":
            project_archs = _strs(info, "project_architectures", tw)
    name = _str(t, "name", tw)
    if not name:
        raise CompileIQError(f"{tw}: a target without a name")
    return Target(
        name=name,
        id=_str(t, "id", tw) or name,
        type=_str(t, "type", tw),
        languages=_strs(t, "languages", tw),
        arch_keys=arch_keys,
        project_architectures=project_archs,
        candidate_files=files,
        source_counts=counts,
        applied_flags=applied,
        cmake_target=_str(t, "target", tw),
        group=_str(t, "group", tw),
        sources=_strs(t, "sources", tw),
    )


def _benchmark(raw: Any, i: int, bw: str) -> Benchmark:
    b = _obj(raw, bw)
    fmt = _str(b, "format", bw) or "auto"
    if fmt not in FORMATS:
        raise CompileIQError(f"{bw}: unknown format {fmt!r}")
    unit = _str(b, "unit", bw) or "s"  # rates (HIGHER_IS_BETTER) have no unit
    if unit not in UNIT_SECONDS:
        raise CompileIQError(f"{bw}: unknown unit {unit!r}")
    timeout = _number(b, "timeout", bw)
    tolerance = _number(b, "tolerance", bw)
    return Benchmark(
        name=_str(b, "name", bw),
        index=i,
        executable=_str(b, "executable", bw),
        executable_target=_str(b, "executable_target", bw),
        args=_strs(b, "args", bw),
        targets=_strs(b, "targets", bw),
        format=fmt,
        regex=_str(b, "regex", bw),
        column=_str(b, "column", bw),
        unit=unit,
        higher_is_better=bool(b.get("higher_is_better", False)),
        workdir=_str(b, "workdir", bw),
        timeout=timeout,
        labels=_strs(b, "labels", bw),
        checksum=_str(b, "checksum", bw),
        output_file=_str(b, "output_file", bw),
        tolerance=tolerance,
    )


def load_project(build_dir: Path) -> Project:
    """Read a user's configured build folder, with a message for each way it can be wrong."""
    build_dir = build_dir.resolve()
    if not build_dir.is_dir():
        raise CompileIQError(
            f"{build_dir} does not exist. Configure the project first: "
            f"cmake -S <source> -B {build_dir} -G Ninja "
            "-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)"
        )
    if not (build_dir / "CMakeCache.txt").is_file():
        raise CompileIQError(
            f"{build_dir} is not a configured CMake build folder (no CMakeCache.txt). "
            f"Configure it: cmake -S <source> -B {build_dir} -G Ninja"
        )
    manifest = build_dir / MANIFEST
    if not manifest.is_file() and any((build_dir / MANIFEST.parent).glob("manifest-*.json")):
        raise CompileIQError(
            f"{build_dir} uses a multi-config generator (one manifest per configuration); "
            "compileiq_build builds candidates with Ninja. Configure a build folder with -G Ninja "
            "and -DCMAKE_BUILD_TYPE=Release.")
    if not manifest.is_file():
        raise CompileIQError(
            f"{build_dir} was configured without CompileIQ ({MANIFEST} is missing). Add "
            "find_package(CompileIQ CONFIG REQUIRED) and compileiq_tune(...) to CMakeLists.txt, "
            "then configure with -DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)."
        )
    project = load_manifest(manifest)
    if project.generator != "Ninja":
        raise CompileIQError(
            f"{build_dir} uses the '{project.generator}' generator; compileiq_build builds "
            "candidates with Ninja. Configure a build folder with -G Ninja."
        )
    if not project.targets:
        raise CompileIQError(
            "no target is marked for tuning. Add compileiq_tune(<target>) to CMakeLists.txt "
            "and re-configure."
        )
    return project
