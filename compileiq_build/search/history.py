"""A target's search so far, read from the store as strategies see it.

The pipeline asks for it before every proposal, so that strategies stay stateless and a
resumed run continues where it stopped; the search of one target starts warm from the other
targets' searches of the same architectures (`transfer`).
"""

from __future__ import annotations

from dataclasses import replace

from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.search.strategies import Candidate, Trial
from compileiq_build.store.database import COMPILED, SCOUT


def trials(evaluator: Evaluator, target: str | None = None) -> list[Trial]:
    """A target's measured search history (default: the evaluator's), as strategies see it."""
    return history(evaluator, target)[0]


def history(evaluator: Evaluator, target: str | None = None) -> tuple[list[Trial], list[Candidate]]:
    """The search so far: its trials, and every compiled candidate with its code and
    compile-time features (the model fits on those, measured or not)."""
    results = replace(evaluator.results, target=target) if target else evaluator.results
    found = results.outcomes("search")
    measured = [Trial(o.evaluation.config, o.ratio, o.faster, o.spread, o.evaluation.digest,
                      phase=o.evaluation.proposed_by, parent=o.evaluation.parent) for o in found]
    ahead = [r for r in results.evaluations(SCOUT) if r.status == COMPILED and r.digest]
    known = [Candidate(r.config, r.digest, r.features or {})
             for r in [*(o.evaluation for o in found), *ahead] if r.digest]
    return measured, known


def transfer(evaluator: Evaluator) -> list[Trial]:
    """Search evaluations of the other targets tuned for the same architectures (warm start)."""
    name = evaluator.target.name
    others = {r.target for r in evaluator.store.evaluations(phase="search") if r.target != name}
    return [t for other in sorted(others) for t in trials(evaluator, other)]
