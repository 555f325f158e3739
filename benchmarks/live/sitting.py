"""One kernel of the live panel (issue 40) at the GPU: tuned as a user tunes it, by the default
search and by the random peer, then judged in the program's own harness.

Given a CMake project that already calls `compileiq_tune`/`compileiq_add_benchmark` (a copy of
a public program with a short CMakeLists.txt, never part of this repository:
benchmarks/results/live/README.md gives each kernel's lines), `sitting`:

1. records the GPU's state;
2. with `--prior-without GLOB...`, learns a prior from the corpus tables less the kernel's
   project (`learn --corpus`), so that the run's prior has never seen it;
3. per run (`default`, `random`), configures a build folder of its own and runs `tune` on it
   (`--budget`, `--time-limit`; a run that ended is not repeated, and one cut short resumes from
   its store while --work is still there: a machine given back takes both with it);
4. builds the baseline and each run's toolchain file (and any `--variant NAME=FILE`, such as
   the best configuration known) and times them in interleaved rounds of the program itself
   (`benchmarks.harness_ab`);
5. records the GPU's state again.

Everything goes to --out: logs, toolchain files, reports, copies of the stores, the harness's
rounds, status lines.  `start` runs the sitting in the background (it outlives a device call);
`wait` follows it and packs --out into one archive in --to ($OUT on the GPU machine), at any
time, so that a machine lost between calls loses at most what the next call would have added.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shlex
import shutil
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.sitting import GPU_QUERY, copy_store, run_logged, stamp, start_background, wait_background
from compileiq_build.errors import CompileIQError
from compileiq_build.machine.environment import find_tool
from compileiq_build.project.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
TABLES = REPO / "benchmarks" / "corpus" / "tables"
RUNS = ("default", "random")


class Sitting:
    """One kernel's folders and log."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.source = Path(args.source).resolve()
        self.work = Path(args.work).resolve()
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = self.out / "sitting.log"
        # As the tool finds them: the PyPI packages' (its dependencies), else PATH's.
        tools = {name: find_tool(name) for name in ("cmake", "ninja")}
        if missing := [name for name, path in tools.items() if path is None]:
            raise CompileIQError(f"{' and '.join(missing)} not found: pip install cmake ninja")
        self.cmake, self.ninja = str(tools["cmake"]), str(tools["ninja"])

    def say(self, text: str) -> None:
        line = stamp(text)
        print(line, flush=True)
        with (self.out / "status.txt").open("a") as f:
            f.write(line + "\n")

    def run(self, cmd: Sequence[str], timeout: float, log: Path | None = None) -> tuple[int, str]:
        """A command, its output in `log` (else the sitting's); this checkout's modules importable."""
        self.say("$ " + shlex.join(cmd))
        paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        return run_logged(cmd, timeout, log or self.log, env, echo=False)

    def tool(self, *args: str, timeout: float, log: Path | None = None) -> tuple[int, str]:
        return self.run([sys.executable, "-m", "compileiq_build", *args], timeout, log)

    def gpu_state(self, name: str) -> None:
        if not shutil.which("nvidia-smi"):
            (self.out / name).write_text("nvidia-smi is not on PATH: no GPU state\n")
            return
        _, text = self.run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv"], 60)
        (self.out / name).write_text(text)

    def configure(self, folder: Path, toolchain: Path | None = None) -> None:
        cmd = [self.cmake, "-S", str(self.source), "-B", str(folder), "-G", "Ninja",
               f"-DCMAKE_MAKE_PROGRAM={self.ninja}", "-DCMAKE_BUILD_TYPE=Release",
               f"-DCompileIQ_ROOT={REPO / 'cmake'}", *self.args.cmake_arg]
        if toolchain is not None:
            cmd.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
        if self.run(cmd, 600)[0] != 0:
            raise CompileIQError(f"configuring {folder} failed (log: {self.log})")

    def prior(self) -> Path | None:
        """--prior, else one learnt without the tables --prior-without names, else None (the
        shipped prior)."""
        if self.args.prior:
            return Path(self.args.prior).resolve()
        if not self.args.prior_without:
            return None
        learnt = self.out / "prior.txt"
        if not learnt.is_file():
            corpus = self.work / "corpus"
            shutil.rmtree(corpus, ignore_errors=True)
            corpus.mkdir()
            kept = [t for t in sorted(TABLES.iterdir())
                    if not any(fnmatch.fnmatch(t.name, g) for g in self.args.prior_without)]
            for table in kept:
                shutil.copy2(table, corpus / table.name)
            self.say(f"learning a prior from {len(kept)} of {len(list(TABLES.iterdir()))} corpus files "
                     f"(without {' '.join(self.args.prior_without)})")
            if self.tool("learn", "--corpus", str(corpus), "--output", str(learnt), timeout=600)[0] != 0:
                raise CompileIQError(f"learn failed (log: {self.log})")
        return learnt

    def tune(self, run: str, prior: Path | None) -> Path:
        """The run's toolchain file; `tune` resumes a run that was cut short from its store."""
        toolchain = self.out / f"tc_{run}.cmake"
        done = self.out / f"tune_{run}.done"
        if done.is_file():
            self.say(f"{run}: tuned in an earlier call")
            return toolchain
        build = self.work / run
        if not (build / "CMakeCache.txt").is_file():
            self.configure(build)
        cmd = ["tune", str(build), "--budget", str(self.args.budget), "--output", str(toolchain)]
        cmd += ["--targets", *self.args.targets] if self.args.targets else []
        cmd += ["--time-limit", self.args.time_limit] if self.args.time_limit else []
        cmd += ["--strategy", "random"] if run == "random" else []
        cmd += ["--prior", str(prior)] if prior is not None else []
        rc, _ = self.tool(*cmd, timeout=self.args.tune_timeout, log=self.out / f"tune_{run}.log")
        self.say(f"{run}: tune exited {rc}")
        if rc != 0 or not toolchain.is_file():
            raise CompileIQError(f"tune of the {run} run failed (log: {self.out / f'tune_{run}.log'})")
        self.tool("report", str(build), timeout=300, log=self.out / f"report_{run}.txt")
        copy_store(Workspace(build).store, self.out / f"store_{run}.sqlite")
        done.write_text(stamp("done") + "\n")
        return toolchain

    def harness(self, variants: dict[str, Path | None]) -> None:
        """Each variant's build of the benchmark's program, timed in interleaved rounds."""
        commands = {}
        for name, toolchain in variants.items():
            folder = self.work / f"harness_{name}"
            self.configure(folder, toolchain)
            if self.run([self.cmake, "--build", str(folder), "--target", self.args.target], 1800)[0] != 0:
                raise CompileIQError(f"building {self.args.target} in {folder} failed (log: {self.log})")
            commands[name] = shlex.join([str(folder / self.args.exe), *shlex.split(self.args.exe_args)])
        cmd = [sys.executable, "-m", "benchmarks.harness_ab", "--rounds", str(self.args.rounds),
               "--regex", self.args.regex, "--csv", str(self.out / "ab.csv"),
               "--json", str(self.out / "ab.json")]
        cmd += ["--higher-is-better"] if self.args.higher_is_better else []
        for name, command in commands.items():
            cmd += ["--variant", name, command]
        rc, _ = self.run(cmd, 3600, log=self.out / "ab.txt")
        if rc != 0:
            raise CompileIQError(f"the harness failed (log: {self.out / 'ab.txt'})")

    def sitting(self) -> None:
        self.gpu_state("env_before.txt")
        prior = self.prior()
        variants: dict[str, Path | None] = {"baseline": None}
        for run in self.args.runs:
            variants[run] = self.tune(run, prior)
        for extra in self.args.variant:
            name, _, file = extra.partition("=")
            variants[name] = Path(file).resolve()
        if self.args.rounds:
            self.harness(variants)
        self.gpu_state("env_after.txt")
        self.say("sitting done")


def pack(out: Path, to: Path) -> Path:
    """--out as one archive in `to` (a device call brings back a few files at most)."""
    to.mkdir(parents=True, exist_ok=True)
    archive = to / f"{out.name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(out.iterdir()):
            if path.is_file() and path.name != "job.pid":
                tar.add(path, arcname=f"{out.name}/{path.name}")
    return archive


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.live.sitting", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="step", required=True)
    for name in ("sitting", "start"):
        background = " in the background" if name == "start" else ""
        s = sub.add_parser(name, help=f"one kernel's runs and harness{background}")
        s.add_argument("--source", required=True, help="its CMake project (with the CompileIQ lines)")
        s.add_argument("--target", required=True, help="the benchmark's executable target")
        s.add_argument("--exe", help="its path in a build folder (default: the target's name)")
        s.add_argument("--exe-args", default="", help="the harness's arguments of it, as one string")
        s.add_argument("--regex", required=True, help="the harness's figure (first group) in its output")
        s.add_argument("--higher-is-better", action="store_true", help="the figure is a rate")
        s.add_argument("--targets", nargs="*", default=[],
                       help="tune --targets (default: every target the project marks)")
        s.add_argument("--runs", nargs="*", choices=RUNS, default=list(RUNS), help="default: default random")
        s.add_argument("--budget", type=int, default=20)
        s.add_argument("--time-limit", default="", help="tune --time-limit of each run (default none)")
        s.add_argument("--tune-timeout", type=float, default=3600, help="seconds a tune may take at most")
        s.add_argument("--prior", help="the runs' prior file")
        s.add_argument("--prior-without", nargs="*", default=[], metavar="GLOB",
                       help="learn the prior from the corpus tables less these (e.g. 'HeCBench__*')")
        s.add_argument("--variant", action="append", default=[], metavar="NAME=TOOLCHAIN",
                       help="another toolchain file for the harness (the best configuration known)")
        s.add_argument("--rounds", type=int, default=10, help="harness rounds (0: no harness)")
        s.add_argument("--cmake-arg", action="append", default=[], help="another -D... for the configures")
        s.add_argument("--work", required=True, help="build folders")
        s.add_argument("--out", required=True, help="logs, toolchain files, stores, harness")
    w = sub.add_parser("wait", help="follow the background sitting, then pack --out into --to")
    w.add_argument("--out", required=True)
    w.add_argument("--to", required=True, help="where the archive goes (on the GPU machine: $OUT)")
    w.add_argument("--timeout", type=float, default=540, help="seconds to wait at most (default 540)")
    args = p.parse_args(argv)
    try:
        if args.step == "start":
            cmd = [sys.executable, "-m", "benchmarks.live.sitting", *(sys.argv[1:] if argv is None else argv)]
            cmd[cmd.index("start")] = "sitting"
            pid = start_background(cmd, Path(args.out).resolve())
            print(f"sitting started (pid {pid}); follow it with: python -m benchmarks.live.sitting wait "
                  f"--out {args.out} --to $OUT")
        elif args.step == "wait":
            out = Path(args.out).resolve()
            wait_background(out, args.timeout, "sitting")
            print(f"packed: {pack(out, Path(args.to))}")
        else:
            args.exe = args.exe or args.target
            Sitting(args).sitting()
    except CompileIQError as exc:
        print(f"sitting: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
