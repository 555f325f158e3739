"""`check`: do the committed toolchain file's flags still beat the project's own?

For a nightly CI job on the machine kind the file was tuned on.  Per tuned target (or group)
the file has flags for: the baseline (the project's own flags) is built and run as `tune`
builds it, the file's flags are built in a candidate tree, their machine code is compared with
the code the file records the gains were measured with (so a target whose code changed since
is named before any measuring), and the two builds are measured paired on the registered
workloads with validation's sampling and statistics (pairing.py, racing.py, selection.py).

Exit codes (`CheckResult.exit_code`): 0 every shipped configuration is still faster beyond
noise on every workload, of unchanged code; 1 one is not (slower, or no longer faster beyond
noise, or its flags leave the code as the baseline's), or it fails to build or run; 3 all still
win, but a target's code changed since it was tuned or a name in the file is no longer tuned
(tune again to re-base the file); 4 the time limit ended the check first (none lost so far);
2 a mistake in the command or the project (CompileIQError).
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from compileiq_build.decide.clock import Clock
from compileiq_build.decide.racing import Sampling
from compileiq_build.decide.selection import Outcome, gains_text
from compileiq_build.errors import CompileIQError
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.machine import environment
from compileiq_build.notes import Notes
from compileiq_build.options import TuneOptions
from compileiq_build.project.manifest import Project, Target, load_project
from compileiq_build.project.workspace import Workspace
from compileiq_build.results.toolchain import DEFAULT_NAME, code_variable, variable_name
from compileiq_build.run.launch import ninja_jobs, start_workers
from compileiq_build.stages.tune import select_targets
from compileiq_build.store.database import Store

HOLDS, LOSES, FAILED, CHANGED, UNCHECKED = "holds", "loses", "failed", "changed", "unchecked"
EXIT = {HOLDS: 0, LOSES: 1, FAILED: 1, CHANGED: 3, UNCHECKED: 4}


@dataclass
class Verdict:
    target: str
    status: str  # one of HOLDS, LOSES, FAILED, CHANGED, UNCHECKED
    text: str  # the line `check` prints for it
    code_changed: bool = False


@dataclass
class CheckResult:
    toolchain: Path
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """The worst verdict's code: a loss (1) before a changed code (3) before the time limit (4)."""
        codes = [EXIT[v.status] for v in self.verdicts]
        for code in (1, 3, 4):
            if code in codes:
                return code
        return 0


_DUMP = """set(CompileIQ_ROOT "-")
include("{path}")
get_cmake_property(_vars VARIABLES)
foreach(_v IN LISTS _vars)
  if(_v MATCHES "^COMPILEIQ_(FLAGS|CODE|TOOLCHAIN_UNITS)")
    message(NOTICE "VAR ${{_v}}")
    foreach(_e IN LISTS ${{_v}})
      message(NOTICE "ELEM ${{_e}}")
    endforeach()
  endif()
endforeach()
"""


def read_toolchain(path: Path) -> dict[str, list[str]]:
    """The file's COMPILEIQ_FLAGS_*, COMPILEIQ_CODE_* and COMPILEIQ_TOOLCHAIN_UNITS as CMake reads
    them (`cmake -P`: the file is CMake code, whoever edited it last)."""
    cmake = environment.find_tool("cmake") or "cmake"
    with tempfile.TemporaryDirectory(prefix="compileiq-check-") as tmp:
        script = Path(tmp) / "dump.cmake"
        script.write_text(_DUMP.format(path=path.resolve().as_posix()), encoding="utf-8")
        proc = subprocess.run([cmake, "-P", str(script)], capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:
        raise CompileIQError(f"CMake cannot read the toolchain file {path}:\n{proc.stderr.strip()[-2000:]}")
    variables: dict[str, list[str]] = {}
    current: list[str] = []
    for line in proc.stderr.splitlines():
        if line.startswith("VAR "):
            current = variables.setdefault(line[4:], [])
        elif line.startswith("ELEM "):
            current.append(line[5:])
    return variables


def shipped_flags(unit: Target, variables: Mapping[str, list[str]]) -> dict[str, tuple[str, ...]]:
    """The flags the file gives `unit` here, per language: its architecture's, else the portable set."""
    flags = {}
    for lang in unit.languages:
        for key in (unit.arch_keys.get(lang, ""), "portable"):
            if (found := variables.get(variable_name(unit.id, lang, key))) is not None:
                flags[lang] = tuple(found)
                break
    return flags


class Checker:
    def __init__(self, build_dir: Path, toolchain: Path | None, options: TuneOptions, notes: Notes) -> None:
        self.workspace = Workspace(build_dir)
        self.project: Project = load_project(self.workspace.build_dir)
        self.toolchain = (toolchain or self.project.source_dir / DEFAULT_NAME).resolve()
        self.options = options
        self.notes = notes
        self.clock = Clock(options.time_limit)  # as tune's: a share per unit, measuring stops at its end

    def run(self, command: str) -> CheckResult:
        if not self.toolchain.is_file():
            raise CompileIQError(f"no toolchain file at {self.toolchain}. Name the committed one with "
                                 "--toolchain FILE.")
        variables = read_toolchain(self.toolchain)
        result = CheckResult(self.toolchain)
        tuned = {t.name for t in self.project.targets}
        for name in variables.get("COMPILEIQ_TOOLCHAIN_UNITS", []):
            if name not in tuned:
                result.verdicts.append(Verdict(name, CHANGED, f"{name}: in the toolchain file, but the "
                                               "project no longer tunes it (renamed or removed?)", True))
        gpus = environment.detect_gpus()
        units = select_targets(self.project, self.options.targets, bool(gpus))
        lock = FileLock(str(self.workspace.lock))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise CompileIQError(f"a `tune` or `check` is running on {self.workspace.build_dir}; wait "
                                 "for it, or stop it first.") from None
        store = Store(self.workspace.check_store)
        try:
            self.notes.phase("configuring the baseline and candidate build trees")
            one = TuneOptions(**{**vars(self.options), "jobs": 1, "compile_ahead": 0, "ray": None})
            started = start_workers(one, self.project, self.workspace.work, gpus,
                                    any("CUDA" in u.languages for u in units), self.notes)
            session = store.start_session(command, {**environment.describe(gpus),
                                                    "toolchain": self.toolchain.name})
            for done, unit in enumerate(units):
                tree_unit = started.tree_project.target(unit.name)
                flags = shipped_flags(tree_unit, variables)
                if not flags:
                    self.notes.note(f"{unit.name}: the toolchain file has no flags for it here; nothing "
                                    "to check")
                    continue
                self.clock.share(len(units) - done)  # an equal part of what --time-limit leaves
                if why := self.clock.why_stop():
                    result.verdicts.append(Verdict(unit.name, UNCHECKED, f"{unit.name}: not checked: {why}"))
                    continue
                code = variables.get(code_variable(tree_unit.id, tree_unit.arch_keys), [])
                benchmarks = started.tree_project.benchmarks_for(unit.name)
                evaluator = Evaluator(tree_unit, benchmarks, started.workers[:1], store, session,
                                      Sampling.of(self.options).scaled(2), ninja_jobs(1), self.notes,
                                      self.options.build_timeout, self.clock)
                result.verdicts.append(self._check(evaluator, flags, code))
            for worker in started.workers:
                worker.reset()
        finally:
            store.close()
            lock.release()
        return result

    def _check(self, evaluator: Evaluator, flags: Mapping[str, tuple[str, ...]],
               code: Sequence[str]) -> Verdict:
        """Build the baseline and the shipped flags, compare the code, measure them paired."""
        name, worker = evaluator.target.name, evaluator.workers[0]
        evaluator.prepare_baseline()
        evaluator.hot_kernels = set(code[1:])  # the kernels the recorded digest covers, if any
        if evaluator.hot_kernels:
            evaluator.rekey_baseline(worker)
        shown = " ".join(f for fl in flags.values() for f in fl)
        self.notes.phase(f"{name}: building it with the shipped flags {shown}")
        built = evaluator.build(flags, worker, 0)
        if not built.result.ok:
            log = "\n".join(built.result.log.strip().splitlines()[-10:])
            return Verdict(name, FAILED, f"{name}: FAILS to build with the shipped flags {shown}:\n{log}")
        changed = ""
        if code and code[0] != built.compiled.digest:
            changed = f"the code of {name} changed since it was tuned"
            self.notes.note(f"{changed} (its machine code is not the one the file's gains were measured "
                            "with); measuring whether the shipped flags still win on it")
        elif not code:
            self.notes.note(f"{name}: the toolchain file records no machine code for it (written before "
                            "`check` existed); its code is not compared")
        if built.compiled.digest and built.compiled.digest == evaluator.baseline.digest:
            return Verdict(name, LOSES, f"{name}: LOSES: the shipped flags {shown} leave its machine code "
                           "as the project's own flags make it; they do nothing"
                           + (f"; {changed}" if changed else ""), bool(changed))
        self.notes.phase(f"{name}: measuring the shipped flags paired with the project's own")
        outcome = evaluator.evaluate({"toolchain": self.toolchain.name}, flags, "check", "check", built)
        return self._verdict(name, shown, outcome, changed)

    def _verdict(self, name: str, shown: str, outcome: Outcome, changed: str) -> Verdict:
        tail = f"; {changed}: tune again to re-base the file" if changed else ""
        if not outcome.valid:
            return Verdict(name, FAILED, f"{name}: FAILS with the shipped flags {shown}: "
                           f"{outcome.error}{tail}", bool(changed))
        if outcome.faster:
            return Verdict(name, CHANGED if changed else HOLDS,
                           f"{name}: still faster with {shown}: {gains_text(outcome)}{tail}", bool(changed))
        lost = [w for w, e in sorted(outcome.estimates.items()) if not e.faster]
        slower = [w for w in lost if outcome.estimates[w].slower]
        what = (f"slower than the project's own flags on {', '.join(slower)}" if slower else
                f"no longer faster beyond noise on {', '.join(lost)}")
        return Verdict(name, LOSES, f"{name}: LOSES with {shown}: {what}: {gains_text(outcome)}{tail}",
                       bool(changed))


def check(build_dir: Path, toolchain: Path | None, options: TuneOptions, notes: Notes,
          command: str) -> CheckResult:
    return Checker(build_dir, toolchain, options, notes).run(command)
