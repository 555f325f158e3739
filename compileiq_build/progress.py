"""What `tune` shows while it works: a live line on a terminal, one plain line per event elsewhere."""

from __future__ import annotations

from rich.console import Console

from compileiq_build.selection import Outcome


class Reporter:
    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.quiet = quiet
        self.best: dict[str, float] = {}
        self.failures = 0

    def _print(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False, soft_wrap=True)

    def phase(self, text: str) -> None:
        self._print(f"== {text}")

    def note(self, text: str) -> None:
        self._print(f"   {text}")

    def progress(self, target: str, done: int, budget: int, key: str) -> None:
        best = self.best.get(target)
        best_text = f", best so far {best:.3f}x" if best else ""
        self._print(f"[{target} {done + 1}/{budget}{best_text}, {self.failures} failed] {key}")

    def outcome(self, target: str, outcome: Outcome) -> None:
        if not outcome.valid:
            self.failures += 1
            first = outcome.error.strip().splitlines()[0] if outcome.error.strip() else "failed"
            self._print(f"      invalid: {first[:200]}")
            return
        parts = []
        for workload, e in outcome.estimates.items():
            parts.append(f"{workload} {e.speedup:.3f}x [{1 / e.high:.3f}, "
                         f"{(1 / e.low) if e.low > 0 else float('inf'):.3f}]")
        self._print(f"      {outcome.verdict}: " + "; ".join(parts))
        if outcome.faster and outcome.ratio:
            self.best[target] = max(self.best.get(target, 1.0), 1.0 / outcome.ratio)
