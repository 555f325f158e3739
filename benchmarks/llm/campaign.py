"""The LLM-inference campaign on ggml's CUDA backend (issue 38): configure, profile, tune, A/B.

Given a ggml checkout (never part of this repository), it configures it with
`ggml-compileiq.cmake` beside this file (groups of ggml-cuda and the test-backend-ops
workloads), then drives `python -m compileiq_build` as a user would: `profile`, then `tune`
per group with the defaults (budget 20), and at the end an interleaved A/B of the project's
flags against the shipped toolchain file in test-backend-ops' own harness, with ggml's
correctness tests (`test-backend-ops test`) on both builds.

A GPU sitting is short and its machine starts bare, so `sitting` does what time allows and
keeps what it learnt: the store, the campaign's state and every log go to --out, to be
committed under benchmarks/results/llm/, from where the next sitting resumes (--resume-from).
`start` runs a sitting in the background (its own session, as setsid does); `wait` follows it
and copies a consistent snapshot to a folder. benchmarks/llm/README.md has the commands.

Correctness per candidate, seeding and ccache are the tool's: each benchmark of
`ggml-compileiq.cmake` has a CHECK (`test-backend-ops test` of its ops) that every candidate
must pass; `tune` builds its baseline tree in full and seeds its candidate tree with the
baseline's objects, so that only the group's files and the links are compiled there; and
ggml's own ccache (GGML_CCACHE) may stay on, since the candidate flags reach nvcc in a form
ccache hashes.  The A/B's tuned build is seeded the same way (`BuildTree.seed_from`).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.sitting import (
    GPU_QUERY,
    copy_store,
    run_logged,
    stamp,
    start_background,
    utc_now,
    wait_background,
)
from compileiq_build.build.trees import BuildTree
from compileiq_build.decide.stats import ratio_estimate
from compileiq_build.errors import CompileIQError
from compileiq_build.project.manifest import load_manifest
from compileiq_build.project.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
INCLUDE = Path(__file__).with_name("ggml-compileiq.cmake")
RESULTS = REPO / "benchmarks" / "results" / "llm"
GROUPS = ("mmq", "mmvq", "fattn", "rope")  # as ggml-compileiq.cmake defines them
DEFAULT_GROUPS = ("mmq", "mmvq", "fattn")
BENCHMARK = {g: f"llm_{g}" for g in GROUPS}
CASE = re.compile(r"^  (?P<name>[A-Z_]+\(.*\)):\s+\d+ runs -\s+(?P<us>[0-9.]+) us/run", re.M)
# How `tune` says a group's search ended other than by the time limit (search/loop.py).
SEARCH_ENDED = re.compile(r"^\s*ggml-cuda:(?P<group>[\w.+-]+): (budget of \d+ evaluations reached|"
                          r"\d+ candidates compiled|strategy \S+ stops: .*)$", re.M)
STATE, STORE = "ggml_llm_state.json", "ggml_llm_results.sqlite"
TOOLCHAIN = "ggml-llm-compileiq-toolchain.cmake"
AB_CSV, AB_JSON, DIFF = "ggml_llm_ab.csv", "ggml_llm_ab.json", "ggml_llm_compile_commands_diff.txt"
PROFILE_S = 420  # at most, per group: the tool gives each ncu run 20 times the benchmark's run + 2 min
AB_MINUTES = 14  # the A/B's full build, seeded tuned build, checks and 10 rounds, measured from the logs


class Campaign:
    """The folders of one campaign and its state (groups searched, profiled, sittings)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ggml = Path(args.ggml).resolve()
        self.work = Path(args.work).resolve()
        self.out = Path(args.out).resolve()
        self.build = self.work / "build"
        self.tuned = self.work / "build-tuned"
        self.out.mkdir(parents=True, exist_ok=True)
        state_file = self.out / STATE
        self.state: dict[str, Any] = (json.loads(state_file.read_text()) if state_file.is_file()
                                      else {"gpu": "", "profiled": {}, "searched": [], "sittings": []})
        self.log = self.out / f"ggml_llm_sitting{len(self.state['sittings']) + 1}_log.txt"
        self.src = self.work / "src"  # what the builds read: a copy that syncing the tree leaves alone
        self.gpu = ""

    # --- output --------------------------------------------------------------------------
    def say(self, text: str) -> None:
        line = stamp(text)
        print(line, flush=True)
        with self.log.open("a") as f:
            f.write(line + "\n")

    def save_state(self) -> None:
        (self.out / STATE).write_text(json.dumps(self.state, indent=1) + "\n")

    def env(self) -> dict[str, str]:
        """The children's environment: this repository's package importable without installing
        it (the GPU machine has none installed), with the wheels unpacked in .llm/site.  Git
        stops at the copies' folder: ggml's configure asks git for its commit, and its copy, which
        has no history, lies inside this repository, whose commit it would print as ggml's."""
        paths = [str(REPO), str(REPO / ".llm" / "site"), os.environ.get("PYTHONPATH", "")]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p),
                "GIT_CEILING_DIRECTORIES": str(self.src.resolve())}

    def run(self, cmd: Sequence[str], timeout: float, cwd: Path | None = None) -> tuple[int, str]:
        """Run a command, its output streamed to the terminal and the sitting's log; returns
        its exit code (-1: stopped at the timeout, with its children) and its output."""
        self.say("$ " + " ".join(cmd))
        rc, text = run_logged(cmd, timeout, self.log, self.env(), cwd)
        if rc == -1:
            print(stamp(f"stopped after {timeout:.0f} s"), flush=True)
        return rc, text

    def tool(self, *args: str, timeout: float) -> tuple[int, str]:
        return self.run([sys.executable, "-m", "compileiq_build", *args], timeout)

    # --- steps ---------------------------------------------------------------------------
    def check_ggml(self) -> None:
        for need in ("src/ggml-cuda/CMakeLists.txt", "tests/test-backend-ops.cpp"):
            if not (self.ggml / need).is_file():
                raise CompileIQError(
                    f"{self.ggml} is not a ggml checkout ({need} is missing). Pass --ggml <folder>: a "
                    "checkout of github.com/ggml-org/ggml (benchmarks/llm/README.md says how to get one "
                    "without its history).")

    def stage(self) -> None:
        """Copy ggml, the CMake module and the integration to the work folder, once: a device
        call copies the working tree again, and a source or module given a new time there would
        rebuild everything in the middle of a search."""
        self.check_ggml()
        for src, dst in ((self.ggml, self.src / "ggml"), (REPO / "cmake", self.src / "cmake")):
            if not dst.is_dir():
                shutil.copytree(src, dst)
        if not (self.src / INCLUDE.name).is_file():
            shutil.copy2(INCLUDE, self.src / INCLUDE.name)

    def configure(self, folder: Path, toolchain: Path | None = None) -> None:
        self.stage()
        cmd = ["cmake", "-S", str(self.src / "ggml"), "-B", str(folder), "-G", "Ninja",
               f"-DCMAKE_PROJECT_ggml_INCLUDE={self.src / INCLUDE.name}",
               f"-DCompileIQ_ROOT={self.src / 'cmake'}",
               "-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={self.args.arch}-real",
               "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DGGML_BUILD_TESTS=ON",
               "-DGGML_BUILD_EXAMPLES=OFF", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *self.args.cmake_arg]
        if toolchain:
            cmd.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain}")
        rc, _ = self.run(cmd, 600)
        if rc != 0:
            raise CompileIQError(f"configuring {folder} failed (log: {self.log})")

    def build_target(self, folder: Path, timeout: float = 3600) -> None:
        start = time.monotonic()
        rc, _ = self.run(["ninja", "-C", str(folder), "test-backend-ops"], timeout)
        if rc != 0:
            raise CompileIQError(f"building test-backend-ops in {folder} failed (log: {self.log})")
        self.say(f"built {folder} in {time.monotonic() - start:.0f} s")

    def gpu_state(self, when: str) -> None:
        rc, text = self.run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv"], 60)
        _, apps = self.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_gpu_memory",
                            "--format=csv"], 60)
        sitting = len(self.state["sittings"])
        with (self.out / f"ggml_llm_gpu_state_sitting{sitting}.txt").open("a") as f:
            f.write(f"# {when}\n{text}{apps}\n")
        if rc != 0:
            raise CompileIQError("nvidia-smi failed: this step needs the GPU machine")

    def check_gpu(self) -> None:
        """One GPU model for the whole campaign: a resumed search compares against its earlier
        measurements, and an H100 and an H200 are both sm_90 to the tool."""
        smi = shutil.which("nvidia-smi")
        proc = smi and subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                                      capture_output=True, text=True, timeout=60)
        name = proc.stdout.strip() if proc else ""
        if not name:
            raise CompileIQError("nvidia-smi finds no GPU: run the sitting on the GPU machine")
        if self.state["gpu"] and self.state["gpu"] != name and not self.args.allow_other_gpu:
            raise CompileIQError(
                f"this campaign's earlier sittings ran on {self.state['gpu']}, this machine has {name}. "
                "Ask for the same kind of machine (nvidia-h100-x1 gets only H100s), or pass "
                "--allow-other-gpu to mix them knowingly.")
        self.state["gpu"] = self.state["gpu"] or name
        self.gpu = name  # this sitting's card: with --allow-other-gpu not the campaign's

    def profile(self, group: str, seconds: float) -> None:
        """One ncu run of the group's benchmark, once per campaign.  ncu times every launch, and
        a decode case launches its kernels thousands of times in its second of runs: where the
        profile fails or takes too long, tune searches that group without one (--no-profile)
        rather than trying again in every sitting."""
        rc, text = self.tool("profile", str(self.build), "--targets", f"ggml-cuda:{group}", timeout=seconds)
        done = rc == 0 and "no kernel profile" not in text
        self.state["profiled"][group] = "done" if done else "failed"
        self.save_state()
        self.say(f"profile of {group}: {self.state['profiled'][group]}")

    def tune(self, group: str, seconds: float) -> None:
        no_profile = [] if self.state["profiled"].get(group) == "done" else ["--no-profile"]
        rc, text = self.tool("tune", str(self.build), "--targets", f"ggml-cuda:{group}",
                             "--budget", str(self.args.budget),
                             "--time-limit", f"{int(seconds)}s", "--output", str(self.out / TOOLCHAIN),
                             *no_profile, timeout=seconds + 600)
        if any(m["group"] == group for m in SEARCH_ENDED.finditer(text)) and rc == 0:
            self.state["searched"] = sorted({*self.state["searched"], group})
            self.save_state()
        self.say(f"tune of {group} exited {rc}; searched to its end: {group in self.state['searched']}")

    def ab(self, groups: Sequence[str], deadline: float) -> None:
        """The project's flags against the toolchain file, in test-backend-ops' harness: rounds
        of both builds in random order until --rounds, or until the sitting's time is up.
        `groups` (the searched ones) are checked; the rounds time the workloads of --ab-groups,
        so that a group the toolchain file leaves alone is the harness's own A/A beside them."""
        toolchain = self.out / TOOLCHAIN
        if not toolchain.is_file():
            raise CompileIQError(f"{toolchain} does not exist: tune writes it; run a sitting first")
        project = load_manifest(Workspace(self.build).manifest)
        # tune's baseline tree on this machine holds the same objects (sitting 7: a full build
        # of this folder took 196 s of a 450 s sitting, 4 of its 10 rounds).
        searched = Workspace(self.build).work / "baseline"
        if searched.is_dir():
            seeded = BuildTree(project, self.build).seed_from(BuildTree(project, searched))
            self.say(f"seeded {self.build} with {seeded} outputs of {searched}")
        self.build_target(self.build)
        self.configure(self.tuned, toolchain)
        seeded = BuildTree(project, self.tuned).seed_from(BuildTree(project, self.build))
        self.say(f"seeded {self.tuned} with {seeded} outputs of {self.build}")
        self.build_target(self.tuned)
        (self.out / DIFF).write_text(compile_commands_diff(self.build, self.tuned))
        self.say("compile commands that differ:\n" + (self.out / DIFF).read_text())
        checks = {f"{g}/{side}": self.correctness(folder, g)
                  for g in groups for side, folder in (("baseline", self.build), ("tuned", self.tuned))}
        project = load_manifest(Workspace(self.build).manifest)
        timed = list(dict.fromkeys([*groups, *self.args.ab_groups]))
        benches = [b for g in timed for b in project.benchmarks if b.name == BENCHMARK[g]]
        times: dict[tuple[str, str], dict[str, list[float]]] = {}
        rng = random.Random(self.args.seed)
        round_s = 0.0
        for r in range(self.args.rounds):
            if time.monotonic() + round_s + 60 > deadline:
                self.say(f"the sitting's time is up: the A/B stops after {r} rounds")
                break
            started = time.monotonic()
            for bench in benches:
                sides = [("baseline", self.build), ("tuned", self.tuned)]
                rng.shuffle(sides)
                for side, folder in sides:
                    exe = folder / "bin" / "test-backend-ops"
                    rc, text = self.run([str(exe), *bench.args], 600)
                    if rc != 0:
                        raise CompileIQError(f"{exe} {' '.join(bench.args)} exited {rc} (log: {self.log})")
                    for m in CASE.finditer(text):
                        case = times.setdefault((bench.name, m["name"]), {})
                        case.setdefault(side, []).append(float(m["us"]))
            round_s = time.monotonic() - started
            self.say(f"A/B round {r + 1}/{self.args.rounds} done in {round_s:.0f} s")
        rows = ab_rows(times)
        write_ab(self.out, rows, checks, {"rounds_asked": self.args.rounds, "gpu": self.gpu,
                                          "searched_on": self.state["gpu"],
                                          "toolchain": toolchain.read_text()})
        self.say(f"A/B: {len(rows)} cases in {self.out / AB_CSV}")

    def correctness(self, folder: Path, group: str) -> dict[str, Any]:
        """The CHECK of the group's benchmark (ggml's test of its ops: the CUDA backend against
        the CPU backend, on ggml's own shapes) with the build in `folder`."""
        manifest = load_manifest(Workspace(folder).manifest)
        check = next(b.check for b in manifest.benchmarks if b.name == BENCHMARK[group])
        rc, text = self.run(list(check), 600)
        summary = re.findall(r"^\s*(\d+/\d+ tests passed)", text, re.M)
        return {"check": shlex.join(check[1:]), "exit": rc, "passed": summary[-1] if summary else ""}

    def snapshot(self, to: Path) -> None:
        """A consistent copy of the store (tune may be writing it) and the campaign's files."""
        to.mkdir(parents=True, exist_ok=True)
        store = Workspace(self.build).store
        if store.is_file():
            copy_store(store, to / STORE)
        if to.resolve() != self.out:
            for f in self.out.iterdir():
                if f.is_file() and f.name != STORE and not f.name.startswith("job."):
                    shutil.copy2(f, to / f.name)

    def restore(self) -> None:
        """The last sitting's store and state, from --resume-from (committed results)."""
        source = Path(self.args.resume_from)
        store = Workspace(self.build).store
        resumed = (source / STORE).is_file() and not store.is_file()
        if resumed:
            store.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / STORE, store)
        for name in (STATE, TOOLCHAIN):
            if (source / name).is_file() and not (self.out / name).is_file():
                shutil.copy2(source / name, self.out / name)
        if (self.out / STATE).is_file():
            self.state = json.loads((self.out / STATE).read_text())
            self.log = self.out / f"ggml_llm_sitting{len(self.state['sittings']) + 1}_log.txt"
        if resumed:  # in the new sitting's log: a line in the last one's replaced its committed log
            self.say(f"resuming from {source / STORE}")

    def sitting(self) -> None:
        """Everything a GPU sitting of --minutes can do, in order; what is left, the next does."""
        deadline = time.monotonic() + 60 * self.args.minutes
        self.restore()
        self.check_gpu()
        self.state["sittings"].append({"started": utc_now(), "log": self.log.name, "ended": "",
                                       "gpu": self.gpu})
        self.save_state()
        self.gpu_state("before")
        groups = self.args.groups
        self.configure(self.build)
        for group in [g for g in groups if g not in self.state["searched"]]:
            left = deadline - time.monotonic() - 120
            if self.args.profile and group not in self.state["profiled"] and left > 600:
                self.profile(group, min(PROFILE_S, left - 300))
                left = deadline - time.monotonic() - 120
            if left < 240:
                self.say(f"{left:.0f} s left: {group} and later groups wait for the next sitting")
                break
            self.tune(group, left)
        if all(g in self.state["searched"] for g in groups):
            left = deadline - time.monotonic()
            if left >= 60 * AB_MINUTES or self.args.ab_anyway:
                self.ab(groups, deadline)
            else:
                self.say(f"every group is searched; the A/B (~{AB_MINUTES} min) waits for the next sitting")
        self.gpu_state("after")
        self.state["sittings"][-1]["ended"] = utc_now()
        self.save_state()
        self.snapshot(self.out)


def compile_commands_diff(base: Path, tuned: Path) -> str:
    """The compile commands of `tuned` that differ from `base`'s, and the words that differ."""
    def commands(folder: Path) -> dict[str, list[str]]:
        entries = json.loads((folder / "compile_commands.json").read_text())
        return {e["file"]: e["command"].replace(str(folder), "<build>").split() for e in entries}
    a, b = commands(base), commands(tuned)
    lines = [f"{len(a)} compile commands in {base.name}, {len(b)} in {tuned.name}"]
    for f in sorted(a.keys() | b.keys()):
        if a.get(f) != b.get(f):
            added = [w for w in b.get(f, []) if w not in a.get(f, [])]
            removed = [w for w in a.get(f, []) if w not in b.get(f, [])]
            lines.append(f"{f}: added {' '.join(added) or '-'}; removed {' '.join(removed) or '-'}")
    return "\n".join(lines) + "\n"


def ab_rows(times: dict[tuple[str, str], dict[str, list[float]]]) -> list[dict[str, Any]]:
    """Per case: medians, and the median of the per-round ratios tuned/baseline with its 95%
    sign-test interval (the tool's statistic); speedup is its inverse."""
    rows = []
    for (bench, case), sides in sorted(times.items()):
        base, tuned = sides.get("baseline", []), sides.get("tuned", [])
        if not base or not tuned:
            continue
        est = ratio_estimate(tuned, base)
        verdict = "faster" if est.faster else "slower" if est.slower else "neutral"
        rows.append({"benchmark": bench, "case": case, "rounds": est.pairs,
                     "baseline_us": statistics.median(base), "tuned_us": statistics.median(tuned),
                     "speedup": 1 / est.ratio, "speedup_low": 1 / est.high if est.high else float("inf"),
                     "speedup_high": 1 / est.low if est.low else float("inf"), "verdict": verdict,
                     "baseline_runs": base, "tuned_runs": tuned})
    return rows


def write_ab(out: Path, rows: list[dict[str, Any]], checks: dict[str, Any], about: dict[str, Any]) -> None:
    fields = ["benchmark", "case", "rounds", "baseline_us", "tuned_us", "speedup", "speedup_low",
              "speedup_high", "verdict"]
    with (out / AB_CSV).open("w", newline="") as f:
        writer = csv.DictWriter(f, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    (out / AB_JSON).write_text(json.dumps({**about, "checks": checks, "cases": rows}, indent=1) + "\n")


def start(args: argparse.Namespace) -> None:
    """The sitting in a session of its own (setsid): it outlives the command that started it."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
    cmd[cmd.index("start")] = "sitting"
    pid = start_background(cmd, Path(args.out).resolve())
    print(f"sitting started (pid {pid}); follow it with: campaign.py wait --to $OUT")


def wait(args: argparse.Namespace, campaign: Campaign) -> None:
    """Wait for the background sitting up to --timeout, then copy its snapshot to --to."""
    wait_background(campaign.out, args.timeout, "sitting")
    campaign.snapshot(Path(args.to))


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ggml", default=str(REPO / ".llm" / "ggml"),
                   help="the ggml checkout (default .llm/ggml)")
    p.add_argument("--work", default=str(REPO / ".llm" / "work"), help="build folders (default .llm/work)")
    p.add_argument("--out", default=str(REPO / ".llm" / "out"),
                   help="the campaign's results, logs and state (default .llm/out)")
    p.add_argument("--arch", default="90", help="CUDA architecture built and tuned (default 90: H100/H200)")
    p.add_argument("--cmake-arg", action="append", default=[],
                   help="another -D... for ggml's configure (repeat it for more)")
    sub = p.add_subparsers(dest="step", required=True)
    sub.add_parser("configure", help="configure ggml with the integration; print the groups and workloads")
    for name in ("sitting", "start"):
        s = sub.add_parser(name, help="one GPU sitting" + (" in the background" if name == "start" else ""))
        s.add_argument("--minutes", type=float, default=21, help="the sitting's length (default 21)")
        s.add_argument("--groups", nargs="+", choices=GROUPS, default=list(DEFAULT_GROUPS),
                       help="groups, searched in this order (default: mmq mmvq fattn)")
        s.add_argument("--budget", type=int, default=20, help="tune --budget per group (default 20)")
        s.add_argument("--rounds", type=int, default=10, help="A/B rounds (default 10)")
        s.add_argument("--seed", type=int, default=0, help="seed of the A/B's order")
        s.add_argument("--ab-groups", nargs="+", choices=GROUPS, default=list(DEFAULT_GROUPS),
                       help="groups whose workloads the A/B times besides --groups (default: mmq mmvq "
                            "fattn): those without flags in the toolchain file show the harness's noise")
        s.add_argument("--resume-from", default=str(RESULTS),
                       help="committed store and state to resume from (default benchmarks/results/llm)")
        s.add_argument("--profile", action="store_true",
                       help="profile each group once (ncu) before tuning it; off by default: in sitting 1 "
                            "`profile` ran past its 7 minutes on an H100 (it then ran every group's "
                            "benchmarks)")
        s.add_argument("--ab-anyway", action="store_true", help="run the A/B even if time looks short")
        s.add_argument("--allow-other-gpu", action="store_true", help="resume on another GPU model")
    w = sub.add_parser("wait", help="follow the background sitting, then copy its snapshot")
    w.add_argument("--to", required=True, help="where the snapshot goes (on the GPU machine: $OUT)")
    w.add_argument("--timeout", type=float, default=540, help="seconds to wait at most (default 540)")
    args = p.parse_args(argv)
    try:
        if args.step == "start":
            start(args)
            return
        campaign = Campaign(args)
        if args.step == "configure":
            campaign.configure(campaign.build)
            print(json.dumps(json.loads(Workspace(campaign.build).manifest.read_text()), indent=1))
        elif args.step == "sitting":
            campaign.sitting()
        else:
            wait(args, campaign)
    except CompileIQError as exc:
        print(f"campaign.py: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
