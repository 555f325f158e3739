"""Stage 2: the flag vocabulary per compiler, probed against the compiler actually installed.

Every flag is one shell-safe token (``--ptxas-options=-dlcm=cg`` rather than
``-Xptxas -dlcm=cg``): CMake de-duplicates repeated compile options, which
would silently drop the second ``-Xptxas`` of a pair.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT = "default"
BASELINE = "baseline"  # the key of the all-default configuration: the project's own flags
Config = dict[str, str]  # dimension key -> value
_SAFE_FLAG = re.compile(r"^[A-Za-z0-9_\-=+.,:/]+$")
# ptxas and gcc accept some bad values with only a warning; such a flag is dropped too.
_REJECTION = re.compile(r"unknown|unrecognized|invalid|ignored|not supported|out of valid range", re.I)


@dataclass(frozen=True)
class Dimension:
    """One compiler option with its values; ``default`` adds no flag."""

    language: str
    name: str
    values: tuple[str, ...]  # not including DEFAULT
    template: str  # the flag, with {v} for the value
    stage: int = 1  # 1 = common ... 3 = exotic
    numerics: bool = False  # changes floating-point results
    note: str = ""
    host_specific: bool = False  # binaries then run only on CPUs like the tuning machine's
    # The compiled code's feature that the values are counts of (a register cap's registers):
    # screening takes first the values nearest the project's own code's (screen.py).
    anchor: str = ""

    @property
    def key(self) -> str:
        return f"{self.language}:{self.name}"

    def flag(self, value: str) -> str | None:
        return None if value == DEFAULT else self.template.format(v=value)


def _cuda_dimensions() -> list[Dimension]:
    d = Dimension
    return [
        d("CUDA", "ptxas-O", ("1", "2"), "--ptxas-options=-O{v}", 1, note="ptxas default is -O3"),
        d("CUDA", "register-usage-level", tuple(str(i) for i in range(11)),
          "--ptxas-options=--register-usage-level={v}", 1, note="BETA in ptxas; default 5"),
        d("CUDA", "maxrregcount", ("32", "64", "96", "128", "168", "255"), "--maxrregcount={v}", 1,
          anchor="registers"),
        d("CUDA", "dlcm", ("cg", "cs", "lu", "cv"), "--ptxas-options=-dlcm={v}", 1,
          note="default load cache modifier (default ca)"),
        d("CUDA", "dscm", ("cg", "cs", "wt"), "--ptxas-options=-dscm={v}", 2,
          note="default store cache modifier (default wb)"),
        d("CUDA", "allow-expensive-optimizations", ("false",),
          "--ptxas-options=--allow-expensive-optimizations={v}", 2),
        d("CUDA", "extra-device-vectorization", ("on",), "--extra-device-vectorization", 2),
        d("CUDA", "jump-table-density", ("0", "50"), "--jump-table-density={v}", 3),
        d("CUDA", "restrict", ("on",), "--restrict", 3,
          note="wrong results if pointers really alias: the benchmark's check must catch it"),
        d("CUDA", "use_fast_math", ("on",), "--use_fast_math", 2, numerics=True),
        d("CUDA", "ftz", ("true",), "--ftz={v}", 2, numerics=True),
        d("CUDA", "prec-div", ("false",), "--prec-div={v}", 2, numerics=True),
        d("CUDA", "prec-sqrt", ("false",), "--prec-sqrt={v}", 2, numerics=True),
        d("CUDA", "fmad", ("false",), "--fmad={v}", 3, numerics=True),
    ]


def _cxx_dimensions() -> list[Dimension]:
    d = Dimension
    return [
        d("CXX", "O", ("2", "3"), "-O{v}", 1, note="appended after the project's own -O"),
        d("CXX", "march", ("native",), "-march={v}", 1, note="binaries then need this CPU",
          host_specific=True),
        d("CXX", "unroll-loops", ("on",), "-funroll-loops", 1),
        d("CXX", "vect-cost-model", ("cheap", "dynamic", "unlimited"), "-fvect-cost-model={v}", 2),
        d("CXX", "no-math-errno", ("on",), "-fno-math-errno", 2,
          note="no errno from math functions; values are unchanged"),
        d("CXX", "prefetch-loop-arrays", ("on",), "-fprefetch-loop-arrays", 3),
        d("CXX", "ipa-pta", ("on",), "-fipa-pta", 3),
        d("CXX", "align-loops", ("32", "64"), "-falign-loops={v}", 3),
        d("CXX", "ffast-math", ("on",), "-ffast-math", 2, numerics=True),
        d("CXX", "fp-contract", ("off",), "-ffp-contract={v}", 3, numerics=True),
    ]


def config_key(config: Mapping[str, str]) -> str:
    """Canonical text of a configuration: its non-default settings, sorted."""
    parts = sorted(f"{k}={v}" for k, v in config.items() if v != DEFAULT)
    return " ".join(parts) if parts else BASELINE


@dataclass(frozen=True)
class Rejected:
    dimension: str
    value: str
    flag: str
    reason: str


@dataclass(frozen=True)
class FlagSpace:
    """The dimensions that survived probing, in stage order, plus what was dropped and why."""

    dimensions: tuple[Dimension, ...]
    rejected: tuple[Rejected, ...] = ()
    excluded_numerics: tuple[str, ...] = ()
    excluded_host_specific: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        n = 1
        for dim in self.dimensions:
            n *= len(dim.values) + 1
        return n

    def default_config(self) -> Config:
        return {dim.key: DEFAULT for dim in self.dimensions}

    def full_config(self, partial: Mapping[str, str]) -> Config:
        """A stored (or partial) configuration with every dimension set; keys of other spaces dropped."""
        config = self.default_config()
        config.update({k: v for k, v in partial.items() if k in config})
        return config

    def changes_numerics(self, config: Mapping[str, str]) -> bool:
        """Whether a configuration sets any numerics-changing option."""
        return any(d.numerics and config.get(d.key, DEFAULT) != DEFAULT for d in self.dimensions)

    def flags(self, config: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
        """Flags per language for a configuration (dimension key -> value)."""
        out: dict[str, list[str]] = {}
        for dim in self.dimensions:
            flag = dim.flag(config.get(dim.key, DEFAULT))
            if flag is not None:
                out.setdefault(dim.language, []).append(flag)
        return {lang: tuple(flags) for lang, flags in out.items()}


@dataclass
class Prober:
    """Compiles a tiny source with each flag; the verdicts are cached per compiler."""

    cache_dir: Path
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    progress: Callable[[str], None] | None = None  # told before a probe that compiles

    def _cache_file(self, language: str, compiler: str, version: str) -> Path:
        digest = hashlib.sha256(f"{language}\0{compiler}\0{version}".encode()).hexdigest()[:16]
        return self.cache_dir / f"probe-{language}-{digest}.json"

    def probe(self, language: str, compiler: str, version: str,
              flags: Iterable[str]) -> dict[str, str]:
        """Map flag -> '' if accepted, else the compiler's complaint."""
        cache = self._cache_file(language, compiler, version)
        known: dict[str, str] = {}
        if cache.is_file():
            try:
                known = json.loads(cache.read_text())
            except (OSError, json.JSONDecodeError):
                known = {}
        todo = [f for f in dict.fromkeys(flags) if f not in known]
        if todo and self.progress:
            self.progress(f"probing {len(todo)} {language} flags with {compiler} (once per compiler version)")
        if todo:
            with ThreadPoolExecutor(max_workers=4) as pool:
                for flag, verdict in zip(todo, pool.map(
                        lambda f: self._try(language, compiler, f), todo), strict=True):
                    known[flag] = verdict
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(known, indent=1, sort_keys=True))
        return known

    def _try(self, language: str, compiler: str, flag: str) -> str:
        if not _SAFE_FLAG.match(flag):
            return "flag text is not a single shell-safe token"
        suffix, text, make = _PROBE_SOURCES[language]
        with tempfile.TemporaryDirectory(prefix="compileiq-probe-") as tmp:
            src = Path(tmp) / f"probe{suffix}"
            src.write_text(text)
            cmd = [compiler, *self.extra_args.get(language, []), flag, make, str(src),
                   "-o", str(Path(tmp) / "probe.o")]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"probe failed: {exc}"
        complaint = (proc.stderr + proc.stdout).strip()
        if proc.returncode != 0:
            return complaint.splitlines()[-1] if complaint else f"exit code {proc.returncode}"
        if _REJECTION.search(complaint):
            return next(line for line in complaint.splitlines() if _REJECTION.search(line))
        return ""


# (suffix, source, what to make).  Every option of the CUDA space is a device-code option, judged
# by nvcc's parser, cicc and ptxas: -cubin runs those without compiling the host code, in 40% of
# -c's time, with the same verdicts on every value of the space (compared on nvcc 13.0).
_PROBE_SOURCES = {
    "CUDA": (".cu", "__global__ void k(float* a, const float* b, int n) {\n"
                    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                    "  if (i < n) a[i] = sqrtf(b[i]) / (1.0f + expf(b[i]));\n}\n", "-cubin"),
    "CXX": (".cpp", "#include <cmath>\nfloat f(const float* a, int n) {\n"
                    "  float s = 0; for (int i = 0; i < n; ++i) s += std::sqrt(a[i]);\n"
                    "  return s;\n}\n", "-c"),
}


def dimensions_for(language: str) -> list[Dimension]:
    if language == "CUDA":
        return _cuda_dimensions()
    if language == "CXX":
        return _cxx_dimensions()
    raise ValueError(f"no flag space for language {language}")


def build_space(languages: Iterable[str], compilers: Mapping[str, tuple[str, str]],
                prober: Prober | None, allow_numerics_change: bool = False,
                max_stage: int = 3, allow_host_specific: bool = False) -> FlagSpace:
    """Probe every value of every dimension; keep what the compiler accepts (without a
    prober: every value, the space's names before anything is compiled)."""
    kept: list[Dimension] = []
    rejected: list[Rejected] = []
    excluded: list[str] = []
    excluded_host: list[str] = []
    for language in languages:
        dims = [d for d in dimensions_for(language) if d.stage <= max_stage]
        numerics = [d for d in dims if d.numerics]
        if not allow_numerics_change:
            excluded += [d.key for d in numerics]
            dims = [d for d in dims if not d.numerics]
        if not allow_host_specific:
            excluded_host += [d.key for d in dims if d.host_specific]
            dims = [d for d in dims if not d.host_specific]
        verdicts = prober.probe(language, *compilers[language],
                                (d.template.format(v=v) for d in dims for v in d.values)) if prober else {}
        for dim in dims:
            good = []
            for value in dim.values:
                flag = dim.template.format(v=value)
                if verdicts.get(flag):
                    rejected.append(Rejected(dim.key, value, flag, verdicts[flag]))
                else:
                    good.append(value)
            if good:
                kept.append(dataclasses.replace(dim, values=tuple(good)))
    kept.sort(key=lambda d: d.stage)  # stable: languages keep their order within a stage
    return FlagSpace(tuple(kept), tuple(rejected), tuple(excluded), tuple(excluded_host))
