"""What `tune` shows while it works.

On a terminal: a live panel (rich) with the phase, evaluations done of the budget,
the best speedup so far and the failures per target, and an ETA, above a log of
the evaluations.  Elsewhere (CI logs, pipes): one plain line per evaluation.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from compileiq_build.decide.selection import Outcome
from compileiq_build.decide.stats import speedup_text


@dataclass
class _TargetState:
    budget: int
    done: int = 0
    failed: int = 0
    best: float = 1.0
    measuring: dict[str, float] = field(default_factory=dict)  # key -> when its measurement began
    finished: list[float] = field(default_factory=list)  # when each evaluation of this run ended
    numbers: dict[int, int] = field(default_factory=dict)  # store row -> its number in the counter

    @property
    def current(self) -> str:
        return ", ".join(self.measuring)


def _eta(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def describe(outcome: Outcome) -> str:
    if not outcome.valid:
        first = outcome.error.strip().splitlines()[0] if outcome.error.strip() else "failed"
        return f"invalid: {first[:160]}"
    shared = _registration(list(outcome.estimates))
    parts = [f"{workload[len(shared):]} {speedup_text(e)} ({e.pairs} pairs)"
             for workload, e in outcome.estimates.items()]
    # A measured evaluation's reason says why it stopped early (raced out).
    stopped = outcome.evaluation.reason if outcome.evaluation.same_as is None else ""
    head = f"{outcome.verdict}: " + (f"{shared[:-1]}: " if shared else "")
    return head + "; ".join(parts) + (f"; {stopped}" if stopped else "")


def _registration(workloads: list[str]) -> str:
    """`name[args]/`, where every one of several workloads is a case of that one registration:
    shown once, not per case (ggml's test-backend-ops: 200 characters of arguments each)."""
    if len(workloads) < 2:
        return ""
    first = workloads[0]
    cuts = [i + 2 for i in range(len(first)) if first.startswith("]/", i)]
    return next((first[:c] for c in reversed(cuts) if all(w.startswith(first[:c]) for w in workloads)), "")


class Reporter:
    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.quiet = quiet
        self.live_mode = self.console.is_terminal and not quiet
        self.targets: dict[str, _TargetState] = {}
        self.phase_text = ""
        self.started = time.monotonic()
        self.first_evaluation: float | None = None
        self.live: Live | None = None
        self._lock = threading.RLock()  # workers report from threads of their own

    # -- lifecycle ----------------------------------------------------------
    def start(self, targets: list[str], budget: int) -> None:
        self.targets = {t: _TargetState(budget) for t in targets}
        if self.live_mode:
            self.live = Live(self._panel(), console=self.console, refresh_per_second=4, transient=False)
            self.live.start()

    def stop(self) -> None:
        if self.live:
            self.live.update(self._panel())
            self.live.stop()
            self.live = None

    # -- events -------------------------------------------------------------
    def _print(self, text: str) -> None:
        with self._lock:
            if not self.quiet:
                self.console.print(Text(text), soft_wrap=True)
            if self.live:
                self.live.update(self._panel())

    def phase(self, text: str) -> None:
        self.phase_text = text
        self._print(f"== {text}")

    def note(self, text: str) -> None:
        self._print(f"   {text}")

    def evaluating(self, target: str, done: int, key: str, best: float = 1.0) -> None:
        """`done`: evaluations of the target already finished, `best`: the best speedup found
        faster so far (those of earlier runs too)."""
        with self._lock:
            state = self.targets.setdefault(target, _TargetState(done + 1))
            if not state.finished and not state.measuring:
                # Evaluations of earlier runs, once: later, a store count can run ahead of the
                # outcomes shown (another worker's result lands in the store before it is shown).
                state.done = max(state.done, done)
                state.best = max(state.best, best)
            state.measuring[key] = time.monotonic()
            self.first_evaluation = self.first_evaluation or state.measuring[key]
            self.phase_text = f"{target}: measuring {state.current}"
            if self.live:
                self.live.update(self._panel())

    def outcome(self, target: str, outcome: Outcome, phase: str = "") -> None:
        """`phase`: the part of the strategy that proposed it.  A candidate of machine code measured
        before costs no evaluation."""
        key = outcome.evaluation.config_key
        with self._lock:
            state = self.targets.setdefault(target, _TargetState(1))
            if outcome.evaluation.same_as is None:
                state.done += 1
                state.finished.append(time.monotonic())
                state.numbers[outcome.evaluation.id] = state.done
            state.measuring.pop(key, None)
            if not outcome.valid:
                state.failed += 1
            elif outcome.faster and outcome.ratio:
                state.best = max(state.best, 1 / outcome.ratio)
            proposed = f"{phase}: " if phase else ""
            if same_as := outcome.evaluation.same_as:  # no evaluation spent: that of the same code
                # Named by the counter's number, not the store's row.
                number = state.numbers.get(same_as)
                proposed += (f"(machine code of evaluation {number}) " if number
                             else "(machine code measured in an earlier run) ")
            line = (f"[{target} {state.done}/{state.budget}, best {state.best:.3f}x, "
                    f"{state.failed} failed, ETA {self.eta()}] {proposed}{key}: {describe(outcome)}")
        self._print(line)

    # -- display ------------------------------------------------------------
    def eta(self) -> str:
        """Evaluations left times the time between evaluations so far (several workers
        finish evaluations faster than one evaluation takes)."""
        finished = sorted(f for t in self.targets.values() for f in t.finished)
        if not finished or self.first_evaluation is None:
            return "?"
        left = sum(max(t.budget - t.done, 0) for t in self.targets.values())
        return _eta(left * (finished[-1] - self.first_evaluation) / len(finished))

    def _panel(self) -> Group:
        table = Table(show_edge=False, pad_edge=False, box=None)
        for column in ("target", "evaluations", "best speedup", "failed", "measuring"):
            table.add_column(column)
        for name, t in self.targets.items():
            table.add_row(name, f"{t.done}/{t.budget}", f"{t.best:.3f}x", str(t.failed), t.current)
        elapsed = _eta(time.monotonic() - self.started)
        return Group(Text(f"{self.phase_text}   (elapsed {elapsed}, ETA {self.eta()})", style="bold"),
                     table)
