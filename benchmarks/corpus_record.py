"""Record a corpus of replay tables: for each kernel of many CUDA programs, its time on the GPU
under every configuration of a sample of the default CUDA flag space, measured in place.

For each program of the manifest it builds the program (`nvcc -cudart shared`), compiles the
program's kernel source under each configuration (the baseline, every one-option move and
`--samples` uniform draws of the space without numerics-changing options: about 130), reads each
cubin's machine code (a digest per kernel, compile-time features), and runs the program once
under the ciqswap shim (benchmarks/corpus/swap.cpp, built at start), which launches every
distinct variant of each kernel wherever the program launches it and times them round by round
in random order.  From the rounds it writes one table per kernel in the format of
benchmarks/search_replay.py: `<out>/<project>__<program>__<kernel>.csv` (a row per
configuration: the options, `time`, `code`, `spread`, `feature:all:*`) and a `.json` of what was
measured beside it, with a line per program in `<out>/record.log`.  With `--densify DIR` (tables
recorded before) it also measures what they leave out where it matters (`dense_configurations`).
A kernel is tabled with at least 8 rounds and a baseline median of 3 us; a row's `time` is the
baseline's median times the median of the variant's per-round ratios to the baseline, `spread`
the relative half-width of the 95% sign-test interval of that median
(compileiq_build.decide.stats).  DIR/work/<project>__<program>/
keeps the build and run logs, the variants' cubins and the shim's rows (shim.csv).

    python -m benchmarks.corpus_record MANIFEST [MANIFEST...] --out DIR [--programs a,b] [--jobs N]
        [--samples 100] [--seed 0] [--arch sm_90] [--redo] [--rounds 30] [--min-rounds 10]
        [--kernel-seconds 2] [--kernel-max-seconds 30] [--rounds-per-call 0 (from launches)]
        [--stop-after SECONDS] [--densify TABLES_DIR]

MANIFEST is a JSON list (or {"programs": [...]}) of entries {"project", "repo", "commit",
"program", "dir", "sources", "kernel_source", "nvcc_args", "run", "launches", "expect_seconds",
"kind", "symbols"}, paths relative to the manifest's folder (sources also relative to `dir`).
The programs' sources are fetched from their repositories into an ignored folder (.corpus_src/)
and never committed; only the tables are.  A program that fails to build or run is logged and
skipped; a program whose `done.json` exists under DIR/work is skipped unless `--redo`.  Needs
nvcc, ptxas, g++, c++filt and cuobjdump, and a GPU for the runs.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import itertools
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.search_replay import load_table
from compileiq_build.build import codeinfo
from compileiq_build.build.space import DEFAULT, Config, Dimension, config_key, dimensions_for
from compileiq_build.decide.stats import ratio_estimate
from compileiq_build.machine.environment import Gpu, detect_gpus, find_tool, tool_version

SHIM_SOURCE = Path(__file__).parent / "corpus" / "swap.cpp"
# Options that act in cicc (they change the PTX): one PTX per combination of them.
PTX_OPTIONS = ("extra-device-vectorization", "restrict", "jump-table-density")
MIN_ROUNDS = 8
MIN_BASELINE_MS = 0.003
BASELINE_ID = "v0"
NOISE_FLOOR = 0.005  # a one-option move helps (dense_configurations) by its spread and at least this


def dimensions() -> list[Dimension]:
    """The default CUDA space of `tune`: its dimensions without the numerics-changing ones."""
    return [d for d in dimensions_for("CUDA") if not d.numerics]


def configurations(dims: Sequence[Dimension], samples: int, seed: int) -> list[Config]:
    """The baseline, every one-option move, then `samples` distinct uniform draws (seeded)."""
    base = {d.key: DEFAULT for d in dims}
    out = [base] + [{**base, d.key: v} for d in dims for v in d.values]
    seen = {config_key(c) for c in out}
    rng = random.Random(seed)
    space = math.prod(len(d.values) + 1 for d in dims)
    drawn = 0
    while drawn < min(samples, space - len(seen)):
        config = {d.key: rng.choice((DEFAULT, *d.values)) for d in dims}
        if (key := config_key(config)) not in seen:
            seen.add(key)
            out.append(config)
            drawn += 1
    return out


def dense_configurations(dims: Sequence[Dimension], tables: Sequence[Path], pairs_of: int = 6,
                         best_rows: int = 3) -> list[Config]:
    """What recorded tables of a program's kernels leave unmeasured where it matters (issue 42's
    corpus, issue 40's open evaluation): the pairs of each kernel's `pairs_of` most helpful
    one-option moves (faster than the baseline beyond their spread, of distinct options), and each
    of its `best_rows` fastest rows of several options less one option in turn: how its gain is
    made.  Without them a landscape answers a best row's neighbours from one-option effects alone
    (benchmarks/open_eval.py `Landscape.reach`)."""
    key = {d.name: d.key for d in dims}
    out: dict[str, Config] = {}
    for path in tables:
        table = load_table(path)
        configs = [{key[n]: v for n, v in row.items() if n in key and v != DEFAULT} for row in table.rows]
        ratio = [t / table.times[table.baseline] for t in table.times]
        helpful = sorted((ratio[i], i) for i, c in enumerate(configs)
                         if len(c) == 1 and ratio[i] < 1 - max(table.spreads[i] or 0.0, NOISE_FLOOR))
        moves: list[Config] = []
        for _, i in helpful:
            if len(moves) < pairs_of and not any(configs[i].keys() & m.keys() for m in moves):
                moves.append(configs[i])
        for a, b in itertools.combinations(moves, 2):
            out.setdefault(config_key({**a, **b}), {**a, **b})
        several = sorted((ratio[i], i) for i, c in enumerate(configs) if len(c) >= 2)[:best_rows]
        for _, i in several:
            for dropped in configs[i]:
                less = {k: v for k, v in configs[i].items() if k != dropped}
                out.setdefault(config_key(less), less)
    full = {d.key: DEFAULT for d in dims}
    return [{**full, **c} for c in out.values()]


def split_flags(dims: Sequence[Dimension], config: Config) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The configuration's nvcc flags that change the PTX, and its ptxas options: the text of
    `--ptxas-options=X` as X, `--maxrregcount=N` as `--maxrregcount N`."""
    cicc: list[str] = []
    ptxas: list[str] = []
    for d in dims:
        flag = d.flag(config.get(d.key, DEFAULT))
        if flag is None:
            continue
        if d.name in PTX_OPTIONS:
            cicc.append(flag)
        elif flag.startswith("--ptxas-options="):
            ptxas.append(flag.removeprefix("--ptxas-options="))
        elif flag.startswith("--maxrregcount="):
            ptxas += ["--maxrregcount", flag.removeprefix("--maxrregcount=")]
        else:
            raise ValueError(f"no ptxas form for flag {flag} of dimension {d.name}")
    return tuple(cicc), tuple(ptxas)


def labels(dims: Sequence[Dimension], config: Config) -> dict[str, str]:
    """The configuration as a table row's option columns: Dimension.name -> value label."""
    return {d.name: config.get(d.key, DEFAULT) for d in dims}


# ---- Machine code --------------------------------------------------------------------------

def sass_digests(sass: bytes) -> tuple[str, dict[str, str]]:
    """The module's digest (its functions' SASS, as codeinfo.read_code digests device code) and
    a digest per function of its own SASS."""
    functions = codeinfo.sass_functions(sass)
    kernels = {name: hashlib.sha256(code).hexdigest() for name, code in functions}
    return hashlib.sha256(b"".join(code for _, code in functions)).hexdigest(), kernels


@dataclass
class Build:
    """One configuration's cubin, what ptxas said, and its code as read."""

    config: Config
    cubin: Path
    log: str = ""
    error: str = ""
    digest: str = ""  # the module's machine code
    kernels: dict[str, str] = field(default_factory=dict)  # kernel -> digest of its code
    features: dict[str, dict[str, float]] = field(default_factory=dict)  # kernel -> all: totals


def read_build(build: Build) -> None:
    """Fill in the digests and per-kernel features of a compiled build.

    The features are codeinfo.read_code's for this one cubin, computed from the SASS read here
    (read_code would disassemble it a second time; tests check that they agree)."""
    sass = codeinfo.cuobjdump_sass(build.cubin)
    if not sass:
        build.error = "cuobjdump found no SASS in the cubin"
        return
    build.digest, build.kernels = sass_digests(sass)
    features = codeinfo.sass_features(sass, build.log)
    present = {key.split(":", 1)[0] for key in features}
    for kernel in build.kernels:
        if codeinfo.feature_label(kernel) in present:
            hot = codeinfo.hot_features(features, {kernel})
            build.features[kernel] = {k: v for k, v in hot.items() if k.startswith("all:")}


# ---- Tools ---------------------------------------------------------------------------------

def run_tool(cmd: Sequence[str], cwd: Path | None = None, timeout: float = 600) -> tuple[int, str]:
    """Return code and stderr+stdout of a command; a missing tool or a timeout is rc 127/124."""
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        return 127, f"{cmd[0]}: not found ({exc})"
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s: {shlex.join(cmd)}"
    return proc.returncode, proc.stderr + proc.stdout


def find_nvcc() -> str:
    nvcc = shutil.which("nvcc") or find_tool("nvcc")
    if not nvcc:
        raise SystemExit("nvcc not found: put the CUDA toolkit's bin folder on PATH")
    return nvcc


def cuda_bin(nvcc: str) -> Path:
    """The toolkit's bin folder: where nvcc itself says it is (`_HERE_` of -dryrun; nvcc on PATH
    may be a wrapper script), else the folder of nvcc's resolved path."""
    _, text = run_tool([nvcc, "-dryrun", "-c", "x.cu"], timeout=60)
    here = re.search(r"^#\$ _HERE_=(.+)$", text, re.M)
    return Path(here[1].strip()) if here else Path(nvcc).resolve().parent


def find_ptxas(nvcc: str) -> str:
    """ptxas of nvcc's toolkit, else on PATH."""
    beside = cuda_bin(nvcc) / "ptxas"
    ptxas = str(beside) if beside.is_file() else shutil.which("ptxas")
    if not ptxas:
        raise SystemExit(f"ptxas not found beside {nvcc} or on PATH")
    return ptxas


def build_shim(out: Path) -> Path:
    """Compile the ciqswap shim into `out`; exits with the compiler's message if that fails."""
    include = cuda_bin(find_nvcc()).parent / "include"
    if not (include / "cuda.h").is_file():
        raise SystemExit(f"no cuda.h in {include}: the shim needs the CUDA toolkit's headers")
    lib = out / "libciqswap.so"
    rc, log = run_tool(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", f"-I{include}",
                        str(SHIM_SOURCE), "-o", str(lib), "-ldl"])
    if rc != 0:
        raise SystemExit(f"building the shim {SHIM_SOURCE} failed:\n{log}")
    return lib


def device_args(nvcc_args: Sequence[str]) -> list[str]:
    """The program's nvcc arguments without link-only ones (-lfoo, -L..., -Xlinker X), which a
    -ptx compile does not take."""
    out: list[str] = []
    skip = False
    for a in nvcc_args:
        if skip:
            skip = False
        elif a in ("-Xlinker", "--linker-options", "-L", "-l"):
            skip = True
        elif not (re.match(r"-l(?!ineinfo)\w", a) or a.startswith(("-L", "-Wl,", "--linker-options=",
                                                                     "-Xlinker=", "--library"))):
            out.append(a)
    return out


def compile_all(kernel_source: Path, cwd: Path, nvcc_args: Sequence[str], dims: Sequence[Dimension],
                configs: Sequence[Config], work: Path, arch: str, jobs: int,
                nvcc: str | None = None, ptxas: str | None = None,
                made: dict[tuple[str, ...], tuple[Path, str]] | None = None) -> list[Build]:
    """Every configuration's cubin of `kernel_source`, read: one nvcc -ptx per combination of the
    PTX-level options, then ptxas -v per configuration, in a pool of `jobs` threads.  `made`
    keeps the PTX made (and nvcc's error, "" if none) per combination across calls."""
    nvcc = nvcc or find_nvcc()
    ptxas = ptxas or find_ptxas(nvcc)
    work.mkdir(parents=True, exist_ok=True)
    split = [split_flags(dims, c) for c in configs]
    made = {} if made is None else made
    ptx_of = {cicc: work / f"p{i}.ptx" for i, cicc in enumerate(dict.fromkeys(s[0] for s in split))
              if cicc not in made}
    args = device_args(nvcc_args)

    def make_ptx(cicc: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[Path, str]]:
        rc, log = run_tool([nvcc, "-O3", f"-arch={arch}", "-ptx", *args, *cicc, str(kernel_source),
                            "-o", str(ptx_of[cicc])], cwd=cwd)
        return cicc, (ptx_of[cicc], "" if rc == 0 else f"nvcc -ptx {' '.join(cicc)}: {_tail(log)}")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        made.update(pool.map(make_ptx, ptx_of))
        ptx_errors = {cicc: error for cicc, (_, error) in made.items()}
        builds = [Build(c, work / f"c{i}.cubin") for i, c in enumerate(configs)]

        def make_cubin(item: tuple[Build, tuple[tuple[str, ...], tuple[str, ...]]]) -> None:
            build, (cicc, opts) = item
            if ptx_errors[cicc]:
                build.error = ptx_errors[cicc]
                return
            rc, log = run_tool([ptxas, f"-arch={arch}", "-m64", "-v", *opts, str(made[cicc][0]),
                                "-o", str(build.cubin)], cwd=cwd)
            build.log = log
            if rc != 0:
                build.error = f"ptxas {' '.join(opts)}: {_tail(log)}"
                return
            read_build(build)

        list(pool.map(make_cubin, zip(builds, split, strict=True)))
    return builds


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Mangled -> demangled names, through one c++filt (names unchanged without it)."""
    names = list(names)
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool or not names:
        return {n: n for n in names}
    proc = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True)
    out = proc.stdout.splitlines()
    return dict(zip(names, out, strict=True)) if len(out) == len(names) else {n: n for n in names}


def short_name(demangled: str) -> str:
    """A kernel's bare name for a file name: `void ns::k<int, 4>(float*, int)` -> `k`."""
    text, depth, cut = demangled, 0, len(demangled)
    for i in range(len(text) - 1, -1, -1):  # drop the parameter list: the last top-level (...)
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0 and text[i] == "(":
            cut = i
            break
    text, out, depth = text[:cut], "", 0
    for ch in text:  # drop template arguments
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if depth == 0 and ch not in "<>":
            out += ch
    base = out.split("::")[-1].split()[-1] if out.split() else demangled
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)[:60] or "kernel"


# ---- Measurements --------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """A variant's time relative to the baseline's in the same rounds."""

    ratio: float
    spread: float | None  # relative half-width of the 95% sign-test interval; None: the baseline
    pairs: int


@dataclass
class KernelTiming:
    kernel: str
    rounds: int  # rounds with a baseline time
    baseline_ms: float  # median
    timed_ms: float  # GPU time of every timed launch of it
    variants: dict[str, Estimate]
    failed: dict[str, int]  # variant -> rounds without a time (a launch that failed)


def read_shim_csv(path: Path) -> dict[str, dict[int, dict[str, float]]]:
    """kernel -> round -> variant -> ms from the shim's rows (`nan`: the launch failed)."""
    rows: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    if not path.is_file():
        return {}
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            try:
                rows[r["kernel"]][int(r["round"])][r["variant"]] = float(r["ms"])
            except (KeyError, TypeError, ValueError):
                continue  # a torn last line of a killed run
    return {k: dict(v) for k, v in rows.items()}


def kernel_timing(kernel: str, rounds: dict[int, dict[str, float]],
                  baseline: str = BASELINE_ID) -> KernelTiming:
    """Per variant, the median of its per-round ratios to the baseline's time in that round and
    the sign-test interval of that median (compileiq_build.decide.stats)."""
    valid = {r: v for r, v in rounds.items() if math.isfinite(v.get(baseline, math.nan)) and v[baseline] > 0}
    base = [v[baseline] for v in valid.values()]
    timed = sum(ms for v in rounds.values() for ms in v.values() if math.isfinite(ms))
    variants: dict[str, Estimate] = {}
    failed: dict[str, int] = defaultdict(int)
    for variant in sorted({name for v in rounds.values() for name in v}):
        pairs = [(v[variant], v[baseline]) for v in valid.values()
                 if variant in v and math.isfinite(v[variant])]
        failed_rounds = sum(1 for v in rounds.values() if variant in v and not math.isfinite(v[variant]))
        if failed_rounds:
            failed[variant] = failed_rounds
        if variant == baseline:
            variants[variant] = Estimate(1.0, None, len(pairs))
        elif len(pairs) >= 2:
            est = ratio_estimate([c for c, _ in pairs], [b for _, b in pairs])
            spread = (est.high - est.low) / 2 / est.ratio if est.ratio > 0 else math.inf
            variants[variant] = Estimate(est.ratio, spread, est.pairs)
    return KernelTiming(kernel, len(valid), statistics.median(base) if base else math.nan, timed,
                        variants, dict(failed))


def assign_variants(builds: Sequence[Build]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The variants to launch: one per distinct module code, in order (the baseline's first, v0);
    and per kernel, the variant launched for each distinct code of that kernel (its first)."""
    variant_of: dict[str, str] = {}
    measured_as: dict[str, dict[str, str]] = defaultdict(dict)
    for b in builds:
        if b.error:
            continue
        variant = variant_of.setdefault(b.digest, f"v{len(variant_of)}")
        for kernel, code in b.kernels.items():
            measured_as[kernel].setdefault(code, variant)
    return variant_of, dict(measured_as)


def table_rows(dims: Sequence[Dimension], builds: Sequence[Build], kernel: str,
               variant_of: dict[str, str], measured_as: dict[str, str],
               timing: KernelTiming, min_rounds: int = MIN_ROUNDS) -> list[dict[str, str]]:
    """One replay-table row per configuration whose kernel was measured: its option labels,
    `time` (baseline median x median ratio), `code` (the kernel's code digest), `spread` and the
    kernel's `feature:all:*`.  `variant_of` maps a module digest to its variant; `measured_as`
    a kernel code digest to the variant launched for it."""
    feature_names = sorted({n for b in builds for n in b.features.get(kernel, {})})
    rows = []
    for b in builds:
        code = b.kernels.get(kernel)
        if b.error or code is None or b.digest not in variant_of:
            continue
        est = timing.variants.get(measured_as.get(code, variant_of[b.digest]))
        if est is None or est.pairs < min_rounds:
            continue
        row = labels(dims, b.config)
        row["time"] = repr(timing.baseline_ms * est.ratio)
        row["code"] = short_code(code)
        row["spread"] = "" if est.spread is None else repr(est.spread)
        feats = b.features.get(kernel, {})
        row.update({f"feature:{n}": repr(feats[n]) if n in feats else "" for n in feature_names})
        rows.append(row)
    return rows


ANONYMOUS = re.compile(rb"_GLOBAL__N__[0-9a-f]+_")


def kernel_code(build: Build, kernel: str) -> tuple[str, dict[str, float]] | None:
    """The code digest and features of `kernel` in a read build, None if it has none.  nvcc names
    an anonymous namespace by the source's path, which differs from the recorder's: such a
    kernel is found under its own name and its SASS digested with the namespace named as in
    `kernel`."""
    if kernel in build.kernels:
        return build.kernels[kernel], build.features.get(kernel, {})
    theirs = ANONYMOUS.search(kernel.encode())
    if theirs is None:
        return None
    own = next((k for k in build.kernels if ANONYMOUS.sub(theirs[0], k.encode()) == kernel.encode()), None)
    if own is None:
        return None
    sass = ANONYMOUS.sub(theirs[0], codeinfo.cuobjdump_sass(build.cubin) or b"")
    return sass_digests(sass)[1].get(kernel, ""), build.features.get(own, {})


def short_code(code: str) -> str:
    """A code digest as the tables hold it: its first 16 hex digits."""
    return code[:16]


def write_table(path: Path, dims: Sequence[Dimension], rows: Sequence[dict[str, str]]) -> None:
    """The rows as a replay table (benchmarks/search_replay.py), written whole or not at all."""
    columns = [d.name for d in dims] + ["time", "code", "spread"]
    columns += sorted({c for r in rows for c in r if c.startswith("feature:")})
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def read_launches(path: Path) -> dict[str, tuple[int, int]]:
    """kernel -> (launches, launches measured), summed over the processes of a run."""
    out: dict[str, tuple[int, int]] = {}
    if path.is_file():
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                try:
                    a, b = out.get(r["kernel"], (0, 0))
                    out[r["kernel"]] = (a + int(r["launches"]), b + int(r["measured"]))
                except (KeyError, TypeError, ValueError):
                    continue
    return out


# ---- Programs ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Program:
    entry: dict
    root: Path  # the manifest's folder

    @property
    def name(self) -> str:
        return f"{self.entry['project']}__{self.entry['program']}"

    @property
    def dir(self) -> Path:
        return (self.root / self.entry["dir"]).resolve()

    def path(self, p: str) -> Path:
        """A source path: relative to the manifest's folder, else to the program's dir."""
        for base in (self.root, self.dir):
            if (base / p).exists():
                return (base / p).resolve()
        raise FileNotFoundError(f"{p} is neither under {self.root} nor under {self.dir}")

    @property
    def sources(self) -> list[str]:
        src = self.entry["sources"]
        return shlex.split(src) if isinstance(src, str) else list(src)

    @property
    def nvcc_args(self) -> list[str]:
        args = self.entry.get("nvcc_args") or []
        return shlex.split(args) if isinstance(args, str) else list(args)

    @property
    def run(self) -> str:
        run = self.entry["run"]
        return run if isinstance(run, str) else shlex.join(run)


def load_manifests(paths: Sequence[Path]) -> list[Program]:
    """The programs of every manifest, each with its own manifest's folder as its root; a
    program named twice (project and program) is an error."""
    programs: list[Program] = []
    for path in paths:
        data = json.loads(path.read_text())
        entries = data.get("programs", data.get("entries")) if isinstance(data, dict) else data
        if not isinstance(entries, list):
            raise SystemExit(f"{path}: expected a list of programs (or {{\"programs\": [...]}})")
        programs += [Program(e, path.parent.resolve()) for e in entries]
    names = [q.name for q in programs]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise SystemExit(f"{', '.join(twice)}: named twice in {', '.join(map(str, paths))}; their tables "
                         "would overwrite each other: rename one (its entry's \"program\")")
    return programs


class Log:
    """Status lines to stdout and <out>/record.log, flushed as they come."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a")

    def __call__(self, line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        print(stamped, flush=True)
        self.file.write(stamped + "\n")
        self.file.flush()


def rounds_per_call(rounds: int, launches: int | str | None) -> int:
    """Rounds per launch so that a kernel gets its rounds (and the shim's warm-up round) even
    when the program launches it a few times: `launches` is the whole program's (several
    kernels share it, hence the margin)."""
    try:
        n = max(1, int(launches or 0))
    except (TypeError, ValueError):
        return 1
    return max(1, min(rounds + 1, math.ceil(4 * (rounds + 1) / n)))


def run_program(prog: Program, lib: Path, env_extra: dict[str, str], log_path: Path,
                timeout: float) -> tuple[int | None, float]:
    """Run the program's command in its dir under the shim; (rc, seconds); rc None: timed out."""
    env = dict(os.environ)
    env.update(env_extra)
    env["LD_PRELOAD"] = " ".join(filter(None, [str(lib), env.get("LD_PRELOAD", "")]))
    start = time.monotonic()
    with log_path.open("w") as out:
        out.write(f"$ cd {prog.dir} && {prog.run}\n")
        out.flush()
        proc = subprocess.Popen(prog.run, shell=True, cwd=prog.dir, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
            for sig, wait in ((signal.SIGINT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=wait)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
    return rc, time.monotonic() - start


@dataclass
class Prepared:
    """A program built and compiled under every configuration, ready to run on the GPU."""

    prog: Program
    work: Path
    started: float
    builds: list[Build]
    good: list[Build]
    variant_of: dict[str, str]
    measured_as: dict[str, dict[str, str]]
    cubin_of: dict[str, Path]


def program_configurations(prog: Program, dims: Sequence[Dimension], args: argparse.Namespace,
                           log: Callable[[str], None]) -> list[Config]:
    """What a program is compiled under: `configurations`, then with `--densify` what its tables
    recorded before leave out (`dense_configurations`)."""
    configs = configurations(dims, args.samples, args.seed)
    if args.densify is not None:
        tables = sorted(args.densify.glob(f"{prog.name}__*.csv"))
        known = {config_key(c) for c in configs}
        dense = [c for c in dense_configurations(dims, tables) if config_key(c) not in known]
        configs += dense
        log(f"{prog.name}: {len(dense)} configurations more from {len(tables)} tables in {args.densify}")
    return configs


def prepare_program(prog: Program, out: Path, args: argparse.Namespace,
                    log: Callable[[str], None]) -> Prepared | None:
    """Build the program and compile its kernel source under every configuration (no GPU)."""
    t0 = time.monotonic()
    e = prog.entry
    work = out / "work" / prog.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        sources = [str(prog.path(s)) for s in prog.sources]
        kernel_source = prog.path(e["kernel_source"])
    except (FileNotFoundError, KeyError) as exc:
        log(f"{prog.name}: SKIPPED, bad manifest entry: {exc}")
        return None
    nvcc = find_nvcc()
    rc, text = run_tool([nvcc, "-O3", f"-arch={args.arch}", "-cudart", "shared", *prog.nvcc_args,
                         *sources, "-o", str(prog.dir / "prog")], cwd=prog.dir)
    (work / "build.log").write_text(text)
    if rc != 0:
        log(f"{prog.name}: SKIPPED, build failed (rc {rc}): {_tail(text, 3)}")
        return None
    _, linked = run_tool(["ldd", str(prog.dir / "prog")], timeout=60)
    if "libcudart.so" not in linked:
        log(f"{prog.name}: SKIPPED, prog does not load libcudart.so (static runtime? check nvcc_args "
            f"for -cudart static): the shim could not see its launches")
        return None
    log(f"{prog.name}: built in {time.monotonic() - t0:.0f} s")

    dims = dimensions()
    configs = program_configurations(prog, dims, args, log)
    t1 = time.monotonic()
    builds = compile_all(kernel_source, prog.dir, prog.nvcc_args, dims, configs, work / "cubins",
                         args.arch, args.jobs, nvcc)
    good = [b for b in builds if not b.error]
    if not good or builds[0].error:
        log(f"{prog.name}: SKIPPED, the baseline did not compile: {builds[0].error}")
        return None
    for reason in sorted({b.error for b in builds if b.error}):
        log(f"{prog.name}:   {sum(b.error == reason for b in builds)} configurations dropped: {reason}")
    variant_of, measured_as = assign_variants(good)
    cubin_of = {b.digest: b.cubin for b in reversed(good)}  # the first build of each code
    (work / "variants.txt").write_text("".join(f"{v} {cubin_of[d]}\n" for d, v in variant_of.items()))
    (work / "kernel_variants.txt").write_text("".join(
        f"{k} {' '.join(v for v in dict.fromkeys(m.values()) if v != BASELINE_ID)}\n"
        for k, m in measured_as.items()))
    names = demangle(measured_as)
    log(f"{prog.name}: {len(configs)} configurations, {len(good)} compiled in "
        f"{time.monotonic() - t1:.0f} s; {len(variant_of)} distinct codes; codes per kernel: "
        + ", ".join(sorted(f"{short_name(names[k])} {len(m)}" for k, m in measured_as.items())))
    return Prepared(prog, work, t0, builds, good, variant_of, measured_as, cubin_of)


def measure_program(ready: Prepared, out: Path, lib: Path, args: argparse.Namespace,
                    log: Callable[[str], None]) -> None:
    """Run a prepared program under the shim and table its kernels."""
    prog, work, e = ready.prog, ready.work, ready.prog.entry
    builds, good, variant_of, measured_as, cubin_of = (ready.builds, ready.good, ready.variant_of,
                                                       ready.measured_as, ready.cubin_of)
    t0 = ready.started
    shim_csv = work / "shim.csv"
    per_call = args.rounds_per_call or rounds_per_call(args.rounds, e.get("launches"))
    timeout = max(60.0, 20.0 * float(e.get("expect_seconds") or 0))
    env = {"CIQ_VARIANTS": str(work / "variants.txt"), "CIQ_OUT": str(shim_csv),
           "CIQ_KERNEL_VARIANTS": str(work / "kernel_variants.txt"),
           "CIQ_ROUNDS": str(args.rounds), "CIQ_MIN_ROUNDS": str(args.min_rounds),
           "CIQ_KERNEL_SECONDS": str(args.kernel_seconds),
           "CIQ_KERNEL_MAX_SECONDS": str(args.kernel_max_seconds),
           "CIQ_ROUNDS_PER_CALL": str(per_call), "CIQ_SEED": str(args.seed)}
    rc_run, seconds = run_program(prog, lib, env, work / "run.log", timeout)
    status = f"timed out after {timeout:.0f} s" if rc_run is None else f"rc {rc_run}"
    shim_said = [line.strip() for line in (work / "run.log").read_text(errors="replace").splitlines()
                 if line.startswith("ciqswap:")]
    log(f"{prog.name}: ran in {seconds:.0f} s ({status})"
        + (f"; shim: {' | '.join(shim_said[-4:])}" if shim_said else ""))

    if not shim_csv.is_file():
        log(f"{prog.name}: no timing rows: the shim saw no launch of a kernel of {e['kernel_source']}"
            + ("" if shim_said else " and said nothing (was it preloaded? see run.log)"))
    written = table_program(prog, out, dimensions(), good, variant_of, measured_as, shim_csv, args, log)
    if written or rc_run == 0:  # else it is recorded again next time
        (work / "done.json").write_text(json.dumps({"status": status, "tables": written}, indent=1))
    for b in builds:  # keep the variants' cubins only
        if b.cubin not in cubin_of.values():
            b.cubin.unlink(missing_ok=True)
    log(f"{prog.name}: {len(written)} kernels tabled ({', '.join(written) or 'none'}) in "
        f"{time.monotonic() - t0:.0f} s")


def table_program(prog: Program, out: Path, dims: Sequence[Dimension], builds: Sequence[Build],
                  variant_of: dict[str, str], measured_as: dict[str, dict[str, str]], shim_csv: Path,
                  args: argparse.Namespace, log: Callable[[str], None] = print) -> list[str]:
    """Write the tables and metadata of every kernel with enough rounds; their file stems."""
    e = prog.entry
    rows = read_shim_csv(shim_csv)
    launches = read_launches(Path(f"{shim_csv}.launches"))
    timings = {k: kernel_timing(k, r) for k, r in rows.items()}
    estimated = {k: t.baseline_ms * launches.get(k, (0, 0))[0] for k, t in timings.items()
                 if math.isfinite(t.baseline_ms)}
    total_timed = sum(t.timed_ms for t in timings.values()) or math.nan
    total_est = sum(estimated.values()) or math.nan
    names = demangle(timings)
    used: set[str] = set()
    written = []
    for kernel, t in sorted(timings.items()):
        if t.rounds < MIN_ROUNDS or not t.baseline_ms >= MIN_BASELINE_MS:
            log(f"{prog.name}:   {short_name(names[kernel])} not tabled: {t.rounds} rounds (at least "
                f"{MIN_ROUNDS}), baseline {t.baseline_ms:.4g} ms (at least {MIN_BASELINE_MS})")
            continue
        short = short_name(names[kernel])
        if sum(short_name(n) == short for n in names.values()) > 1:  # template instances
            short += "-" + hashlib.sha1(kernel.encode()).hexdigest()[:8]
        stem = f"{prog.name}__{short}"
        if stem in used:
            raise RuntimeError(f"two kernels of {prog.name} have the table name {stem}")
        used.add(stem)
        table = table_rows(dims, builds, kernel, variant_of, measured_as.get(kernel, {}), t)
        write_table(out / f"{stem}.csv", dims, table)
        meta = {
            "project": e.get("project"), "repo": e.get("repo"), "commit": e.get("commit"),
            "program": e.get("program"), "kind": e.get("kind"), "run": prog.run,
            "kernel": kernel, "demangled": names[kernel], "kernel_source": e.get("kernel_source"),
            "nvcc_args": prog.nvcc_args, "arch": args.arch, "rounds": t.rounds,
            "baseline_ms": t.baseline_ms, "rows": len(table), "configurations": len(builds),
            "codes": len({r["code"] for r in table}), "variants_launched": len(measured_as.get(kernel, {})),
            "launches": launches.get(kernel, (0, 0))[0], "launches_measured": launches.get(kernel, (0, 0))[1],
            "timed_ms": t.timed_ms, "share_of_timed_gpu_time": t.timed_ms / total_timed,
            "share_of_kernel_time_est": estimated.get(kernel, math.nan) / total_est,
            "failed_launches": t.failed, "samples": args.samples, "seed": args.seed,
            "min_ratio": min((est.ratio for est in t.variants.values()), default=math.nan),
            "manifest": {k: e.get(k) for k in ("launches", "expect_seconds", "symbols")},
            "gpu": args.gpu, "driver": args.driver, "nvcc": args.nvcc,
        }
        (out / f"{stem}.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
        written.append(stem)
    return written


def recording_gpu(gpus: Sequence[Gpu], visible: str) -> Gpu | None:
    """The GPU the programs run on: the first of CUDA_VISIBLE_DEVICES (`visible`, an index or a
    UUID) where set, else device 0.  Each table names it: only tables of one card type are
    comparable, and the corpus holds tables of two (H200 and H100)."""
    first = visible.split(",")[0].strip()
    if not first:
        return gpus[0] if gpus else None
    return next((g for g in gpus if first in (str(g.index), g.uuid)), None)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("manifest", type=Path, nargs="+", help="one or more manifests")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--programs", default="", help="comma-separated program (or project/program) names")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--samples", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--rounds", type=int, default=30, help="CIQ_ROUNDS")
    p.add_argument("--min-rounds", type=int, default=10, help="CIQ_MIN_ROUNDS")
    p.add_argument("--kernel-seconds", type=float, default=2.0, help="CIQ_KERNEL_SECONDS")
    p.add_argument("--kernel-max-seconds", type=float, default=30.0, help="CIQ_KERNEL_MAX_SECONDS")
    p.add_argument("--rounds-per-call", type=int, default=0,
                   help="CIQ_ROUNDS_PER_CALL; 0: from the manifest's launches (more for programs "
                        "that launch their kernels a few times only)")
    p.add_argument("--densify", type=Path,
                   help="a folder of this program's tables recorded before: also measure the pairs of "
                        "their helpful moves and their best rows less one option (dense_configurations)")
    p.add_argument("--redo", action="store_true", help="record programs done before again")
    p.add_argument("--stop-after", type=float, default=0.0,
                   help="seconds: no program starts after this (0: no limit); a later run goes on")
    args = p.parse_args(argv)
    deadline = time.monotonic() + args.stop_after if args.stop_after > 0 else math.inf
    args.out = args.out.resolve()  # the tools run in the programs' folders
    gpu = recording_gpu(detect_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    args.gpu, args.driver = (gpu.name, gpu.driver) if gpu else ("", "")
    args.nvcc = tool_version(find_nvcc())
    programs = load_manifests(args.manifest)
    if args.programs:
        wanted = set(args.programs.split(","))
        programs = [q for q in programs if {q.entry.get("program"), q.name,
                                             f"{q.entry.get('project')}/{q.entry.get('program')}"} & wanted]
        if not programs:
            raise SystemExit(f"no program of {', '.join(map(str, args.manifest))} is named {args.programs}")
    args.out.mkdir(parents=True, exist_ok=True)
    log = Log(args.out / "record.log")
    lib = build_shim(args.out)
    log(f"recording {len(programs)} programs from {', '.join(map(str, args.manifest))} into {args.out} "
        f"(shim {lib}) on {args.gpu or 'no GPU found'} (driver {args.driver or '-'}), {args.nvcc}")
    todo = [q for q in programs if args.redo or not (args.out / "work" / q.name / "done.json").is_file()]
    for q in programs:
        if q not in todo:
            log(f"{q.name}: done before, skipped (--redo records it again)")

    def prepare(q: Program) -> Prepared | None:
        try:
            return prepare_program(q, args.out, args, log)
        except Exception as exc:  # one program's failure must not lose the others
            log(f"{q.name}: FAILED: {type(exc).__name__}: {exc}")
            return None

    # The next program compiles (CPU) while this one runs (GPU): kernel times are GPU-side.
    with ThreadPoolExecutor(1) as ahead:
        pending = ahead.submit(prepare, todo[0]) if todo else None
        for i, q in enumerate(todo):
            assert pending is not None
            if time.monotonic() > deadline:
                log(f"--stop-after reached: {len(todo) - i} programs left for a later run")
                pending.cancel()
                break
            ready = pending.result()
            pending = ahead.submit(prepare, todo[i + 1]) if i + 1 < len(todo) else None
            if ready is None:
                continue
            try:
                measure_program(ready, args.out, lib, args, log)
            except KeyboardInterrupt:
                log(f"{q.name}: interrupted")
                return 130
            except Exception as exc:  # one program's failure must not lose the others
                log(f"{q.name}: FAILED: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
