"""Stage 1: read the manifest that CompileIQ.cmake writes at configure time into a `Project`."""

from __future__ import annotations

import functools
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compileiq_build import cmake_dir
from compileiq_build.errors import CompileIQError
from compileiq_build.project.workspace import Workspace

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
    files: tuple[str, ...] = ()  # what its sources' digest covers, relative to the source folder

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
    check: tuple[str, ...] = ()  # CHECK: a command each candidate's build must pass before its pairs
    check_target: str = ""  # the executable target of `check`, where it is one

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


# The manifest's fields, per section, are those of cmake/manifest_fields.json, by which
# CompileIQ.cmake writes them: each with its JSON type, whether the reader requires it, and
# where CMake takes it from.
FIELD_TABLE = "manifest_fields.json"
FIELD_KEYS = ("name", "type", "required", "written", "cmake", "origin", "description")
TYPES = {"string": "a string", "strings": "a list of strings", "bool": "true or false",
         "int": "an integer", "map": "a JSON object", "list": "a list"}


@functools.cache
def field_table() -> dict[str, Any]:
    """The field table that ships with the CMake module, checked for the keys this reader uses."""
    try:
        path = cmake_dir() / FIELD_TABLE
        table = json.loads(path.read_text(encoding="utf-8"))
        bad = [f.get("name") for section in table["sections"].values() for f in section["fields"]
               if any(k not in f for k in FIELD_KEYS) or f["type"] not in TYPES]
        if bad or not isinstance(table["schema"], int):
            raise ValueError(f"fields {bad} lack one of {FIELD_KEYS} or have an unknown type")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CompileIQError(
            f"cannot read the manifest's field table {FIELD_TABLE} next to CompileIQ.cmake: {exc}. "
            "Reinstall compileiq-build (python -m pip install --force-reinstall compileiq-build)."
        ) from None
    return table


def manifest_schema() -> int:
    """The manifest schema this reader (and the CMake module beside it) knows."""
    schema: int = field_table()["schema"]
    return schema


def _is(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "strings":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, dict if kind == "map" else list)


def _empty(kind: str) -> Any:
    """The value of an optional field the manifest lacks (an int: None)."""
    return {"string": "", "strings": (), "bool": False, "int": None, "map": {}, "list": []}[kind]


def _fields(raw: Any, section: str, where: str) -> dict[str, Any]:
    """The fields of one entry of `section`, by the field table: each of its type (lists of
    strings as tuples), an optional one missing its empty value; unknown keys are ignored."""
    d = _obj(raw, where)
    out: dict[str, Any] = {}
    for f in field_table()["sections"][section]["fields"]:
        name, kind = f["name"], f["type"]
        if name not in d:
            if f["required"]:
                raise CompileIQError(
                    f"{where} has no '{name}' ({f['description']}); CompileIQ.cmake always writes it, "
                    "so the manifest was edited or written by something else. Re-run the CMake configure "
                    "step of the build folder.")
            out[name] = _empty(kind)
            continue
        value = d[name]
        if not _is(value, kind):
            shown = type(value).__name__ if kind in ("map", "list") else repr(value)[:80]
            raise CompileIQError(f"{where}: '{name}' should be {TYPES[kind]}, got {shown}")
        out[name] = tuple(value) if kind == "strings" else value
    return out


def _number(text: str, key: str, where: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        raise CompileIQError(f"{where}: {key} {text!r} is not a number") from None


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
    schema, known = m.get("schema"), manifest_schema()
    if schema != known or isinstance(schema, bool):
        raise CompileIQError(
            f"{where} has manifest schema {schema!r}, this compileiq_build reads schema {known}. "
            "Re-configure the build folder with the CompileIQ module of this version "
            "(-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir))."
        )
    f = _fields(m, "manifest", where)
    compilers = {lang: _compiler(lang, c, f"{where}: compilers.{lang}") for lang, c in f["compilers"].items()}
    targets = tuple(_target(t, f"{where}: targets[{i}]") for i, t in enumerate(f["targets"]))
    benchmarks = tuple(_benchmark(b, i, f"{where}: benchmarks[{i}]") for i, b in enumerate(f["benchmarks"]))
    source_dir = Path(f["source_dir"])
    return Project(
        # Manifests written before project_name was recorded: the source folder's name.
        name=f["project_name"] or source_dir.name,
        source_dir=source_dir,
        binary_dir=Path(f["binary_dir"]),
        generator=f["generator"],
        build_type=f["build_type"],
        cmake_command=f["cmake_command"],
        make_program=f["make_program"],
        host_key=f["host_key"],
        compilers=compilers,
        targets=targets,
        benchmarks=benchmarks,
        candidate_flags=f["candidate_flags"],
        tuning_arch=f["tuning_arch"],
    )


def _compiler(lang: str, raw: Any, cw: str) -> Compiler:
    c = _fields(raw, "compilers", cw)
    return Compiler(language=lang, id=c["id"], version=c["version"], path=c["path"], flags=c["flags"],
                    config_flags=c["config_flags"])


def _target(raw: Any, tw: str) -> Target:
    """One entry of the manifest's targets, its per-language fields gathered per field."""
    t = _fields(raw, "targets", tw)
    if not t["name"]:
        raise CompileIQError(f"{tw}: a target without a name")
    arch_keys, files, applied, counts = {}, {}, {}, {}
    project_archs: tuple[str, ...] = ()
    for lang, info in t["per_language"].items():
        li = _fields(info, "per_language", f"{tw}.per_language.{lang}")
        arch_keys[lang] = li["arch_key"]
        if li["candidate_file"]:
            files[lang] = Path(li["candidate_file"])
        if li["sources"] is not None:
            counts[lang] = li["sources"]
        applied[lang] = li["applied_flags"]
        if lang == "CUDA":
            project_archs = li["project_architectures"]
    return Target(
        name=t["name"],
        id=t["id"] or t["name"],
        type=t["type"],
        languages=t["languages"],
        arch_keys=arch_keys,
        project_architectures=project_archs,
        candidate_files=files,
        source_counts=counts,
        applied_flags=applied,
        cmake_target=t["target"],
        group=t["group"],
        sources=t["sources"],
        files=t["files"],
    )


def _benchmark(raw: Any, i: int, bw: str) -> Benchmark:
    b = _fields(raw, "benchmarks", bw)
    fmt = b["format"] or "auto"
    if fmt not in FORMATS:
        raise CompileIQError(f"{bw}: unknown format {fmt!r}")
    unit = b["unit"] or "s"  # rates (HIGHER_IS_BETTER) have no unit
    if unit not in UNIT_SECONDS:
        raise CompileIQError(f"{bw}: unknown unit {unit!r}")
    return Benchmark(
        name=b["name"],
        index=i,
        executable=b["executable"],
        executable_target=b["executable_target"],
        args=b["args"],
        targets=b["targets"],
        format=fmt,
        regex=b["regex"],
        column=b["column"],
        unit=unit,
        higher_is_better=b["higher_is_better"],
        workdir=b["workdir"],
        timeout=_number(b["timeout"], "timeout", bw),
        labels=b["labels"],
        checksum=b["checksum"],
        output_file=b["output_file"],
        tolerance=_number(b["tolerance"], "tolerance", bw),
        check=b["check"],
        check_target=b["check_target"],
    )


def load_project(build_dir: Path) -> Project:
    """Read a user's configured build folder, with a message for each way it can be wrong."""
    workspace = Workspace(build_dir)
    build_dir = workspace.build_dir
    if not build_dir.is_dir():
        raise CompileIQError(
            f"{build_dir} does not exist. Configure the project first: "
            f"cmake -S <source> -B {build_dir} -G Ninja "
            "-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)"
        )
    if not (build_dir / "CMakeCache.txt").is_file():
        raise CompileIQError(
            f"{build_dir} is not a configured CMake build folder (no CMakeCache.txt). "
            f"Configure it: cmake -S <source> -B {build_dir} -G Ninja "
            "-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)"
        )
    manifest = workspace.manifest
    if not manifest.is_file() and workspace.config_manifests:
        raise CompileIQError(
            f"{build_dir} uses a multi-config generator (one manifest per configuration); "
            "compileiq_build builds candidates with Ninja. Configure a build folder with -G Ninja "
            "and -DCMAKE_BUILD_TYPE=Release.")
    if not manifest.is_file():
        raise CompileIQError(
            f"{build_dir} was configured without CompileIQ ({manifest.relative_to(build_dir)} is "
            "missing). Add "
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
