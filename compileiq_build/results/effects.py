"""What single options did, as measured: the report's account of which options matter.

Two views of one target's stored measurements, no model involved:

- one-option moves: a configuration that differs from the baseline in one option only,
  measured against the baseline like every candidate;
- removals: for the winner, the measured configuration equal to it minus one option,
  beside the winner's own re-measurement.

A model's importance ranking (LightGBM gain, which the report showed before) credits options
that merely co-occur with good ones in the measured configurations; on a real SGEMM it ranked
two options first that did nothing alone.  These views claim only what was measured, and say
so when the measurements cannot tell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compileiq_build.build.space import BASELINE, DEFAULT, config_key, dimensions_for
from compileiq_build.decide.selection import SAME_AS_BASELINE, NoWinner, Outcome, Winner
from compileiq_build.decide.stats import RatioEstimate
from compileiq_build.decide.stats import speedup_text as interval_text

NOT_ALONE = "not measured alone"
NOT_MEASURED = "not measured"
NOISE = "no effect beyond noise"
SAME_AS_BASELINE_CODE = "same machine code as the baseline"
SAME_AS_WINNER_CODE = "same machine code as the winner"
TOO_FEW = "one pair per workload: too few to tell"


def speedup_text(e: RatioEstimate) -> str:
    """Speedup (baseline / candidate) with its 95% interval, as the reports print it."""
    return interval_text(e, "x")


def estimates_text(estimates: dict[str, RatioEstimate]) -> str:
    """Every workload's speedup with its interval and pairs; one workload needs no name."""
    if len(estimates) == 1:
        (e,) = estimates.values()
        return f"{speedup_text(e)}, {e.pairs} pairs"
    return "; ".join(f"{w}: {speedup_text(e)}, {e.pairs} pairs" for w, e in sorted(estimates.items()))


def option_flag(option: str) -> str:
    """The compiler flag of "LANG:name=value", or the option itself when this version has no
    such dimension (a store written by another version)."""
    key, _, value = option.partition("=")
    language, _, name = key.partition(":")
    try:
        dims = dimensions_for(language)
    except ValueError:
        return option
    dim = next((d for d in dims if d.name == name), None)
    return (dim.flag(value) or option) if dim else option


def _options(o: Outcome) -> dict[str, str]:
    return {k: v for k, v in o.evaluation.config.items() if v != DEFAULT}


def _pick(found: Sequence[Outcome]) -> Outcome | None:
    """The measurement that stands for a configuration: a valid re-measurement (validate phase,
    fresh pairs) before a valid search measurement, the most pairs among those, else any."""
    if not found:
        return None
    return max(found, key=lambda o: (o.valid, o.evaluation.phase == "validate",
                                     sum(e.pairs for e in o.estimates.values())))


def _measured_estimates(o: Outcome | None) -> dict[str, RatioEstimate]:
    """Estimates worth showing: of a valid measurement with samples of its own or of a twin's
    (a candidate with the baseline's code was not run: its 1.0 is no measurement)."""
    if o is None or not o.valid or o.evaluation.same_as == SAME_AS_BASELINE:
        return {}
    return o.estimates


def _against_baseline(o: Outcome) -> str:
    """What one measurement against the baseline says, in words."""
    if o.evaluation.same_as == SAME_AS_BASELINE:
        return SAME_AS_BASELINE_CODE
    if not o.valid:
        return f"invalid: {o.error.strip().splitlines()[0][:160] if o.error.strip() else 'no reason stored'}"
    if all(e.pairs < 2 for e in o.estimates.values()):
        return TOO_FEW
    faster = [w for w, e in o.estimates.items() if e.faster]
    slower = [w for w, e in o.estimates.items() if e.slower]
    if len(faster) == len(o.estimates):
        return "faster"
    if slower and not faster:
        return "slower" if len(slower) == len(o.estimates) else f"slower on {', '.join(sorted(slower))}"
    if faster and slower:
        return f"faster on {', '.join(sorted(faster))}, slower on {', '.join(sorted(slower))}"
    if faster:
        return f"faster on {', '.join(sorted(faster))} only; elsewhere {NOISE}"
    return NOISE


@dataclass(frozen=True)
class Move:
    """One option value alone against the baseline."""

    option: str  # "CUDA:restrict=on", as in configuration keys
    outcome: Outcome | None  # its one-option measurement; None when it was measured only with others
    measured_with: int  # how many distinct measured configurations hold it

    @property
    def flag(self) -> str:
        return option_flag(self.option)

    @property
    def estimates(self) -> dict[str, RatioEstimate]:
        return _measured_estimates(self.outcome)

    @property
    def finding(self) -> str:
        return NOT_ALONE if self.outcome is None else _against_baseline(self.outcome)


def one_option_moves(measured: Sequence[Outcome]) -> list[Move]:
    """Every option value found in a measured configuration, with its one-option move where one was
    measured: the largest speedups first, then those never measured alone."""
    alone: dict[str, list[Outcome]] = {}
    holding: dict[str, set[str]] = {}  # option -> the configurations that hold it
    for o in measured:
        options = _options(o)
        for k, v in options.items():
            holding.setdefault(f"{k}={v}", set()).add(o.evaluation.config_key)
        if len(options) == 1:
            alone.setdefault(config_key(options), []).append(o)
    moves = [Move(opt, _pick(alone.get(opt, [])), len(keys)) for opt, keys in holding.items()]

    def order(m: Move) -> tuple[int, float, str]:
        ratio = m.outcome.ratio if m.outcome is not None and m.outcome.ratio is not None else math.inf
        return (m.outcome is None, ratio, m.option)

    return sorted(moves, key=order)


@dataclass(frozen=True)
class Removal:
    """The winner without one of its options, beside the winner's re-measurement."""

    option: str
    remaining: str  # configuration key of the winner less the option (BASELINE for a one-option winner)
    outcome: Outcome | None  # that configuration's measurement; None when not measured (or the baseline)
    winner: dict[str, RatioEstimate]  # the winner's re-measurement, per workload
    same_code_as_winner: bool

    @property
    def flag(self) -> str:
        return option_flag(self.option)

    @property
    def estimates(self) -> dict[str, RatioEstimate]:
        return {} if self.same_code_as_winner else _measured_estimates(self.outcome)

    @property
    def finding(self) -> str:
        if self.remaining == BASELINE:
            # The baseline runs beside every candidate: the winner's own re-measurement is this effect.
            return "leaves the baseline: the winner's whole gain is lost without it"
        if self.outcome is None:
            return NOT_MEASURED
        if self.same_code_as_winner:
            return f"{SAME_AS_WINNER_CODE}: the option changes nothing in it"
        if self.outcome.evaluation.same_as == SAME_AS_BASELINE:
            return f"{SAME_AS_BASELINE_CODE}: the winner's whole gain is lost without it"
        if not self.outcome.valid:
            return _against_baseline(self.outcome)
        common = sorted(set(self.outcome.estimates) & set(self.winner))
        if not common or all(self.outcome.estimates[w].pairs < 2 for w in common):
            return TOO_FEW
        # Both are paired with the baseline, not with each other: only intervals that do not
        # overlap tell the two apart (conservative for 95% intervals).
        worse = [w for w in common if self.outcome.estimates[w].low > self.winner[w].high]
        better = [w for w in common if self.outcome.estimates[w].high < self.winner[w].low]
        if worse and not better:
            return "slower without it" + (f" on {', '.join(worse)}" if len(common) > 1 else "")
        if better and not worse:
            return "faster without it" + (f" on {', '.join(better)}" if len(common) > 1 else "")
        if worse and better:
            return f"slower without it on {', '.join(worse)}, faster on {', '.join(better)}"
        return f"{NOISE} (its interval overlaps the winner's)"


def removals(winner: Winner, measured: Sequence[Outcome]) -> list[Removal]:
    """For each option of the winner, the measured configuration without it (search or validate)."""
    own = [o for o in measured if o.evaluation.config_key == winner.config_key]
    if not own:
        return []
    options = _options(own[0])
    digests = {o.evaluation.digest for o in own if o.evaluation.digest}
    gains = {g.workload: g.estimate for g in winner.gains}
    result = []
    for k, v in sorted(options.items()):
        remaining = config_key({key: val for key, val in options.items() if key != k})
        found = [o for o in measured if o.evaluation.config_key == remaining]
        pick = _pick(found) if remaining != BASELINE else None
        same = any(o.evaluation.digest in digests for o in found if o.evaluation.digest)
        result.append(Removal(f"{k}={v}", remaining, pick, gains, same))
    return result


def predicted_lines(sessions: list[tuple[int, float, str, dict[str, object]]], target: str,
                    decision: Winner | NoWinner) -> list[str]:
    """What the prior predicted of the shipped configuration, option by option, as the last run
    that decided it recorded (LightGBM's pred_contrib): a prediction, beside the measured effects."""
    def recorded(env: dict[str, object], key: str) -> Any:
        value = env.get(key)
        return value.get(target) if isinstance(value, dict) else None

    used = next((u for *_, env in reversed(sessions) if (u := recorded(env, "prior_used"))), None)
    lines = [f"  prior of its last search: {used}"] if used else []
    for *_, env in reversed(sessions):
        found = recorded(env, "predicted")
        if isinstance(decision, Winner) and found and found.get("config") == decision.config_key:
            parts = sorted(found["contributions"].items(), key=lambda kv: kv[1])
            shown = ", ".join(f"{k} {100 * math.expm1(v):+.1f}%" for k, v in parts)
            lines.append(f"  Predicted by the prior ({found['prior']}; a prediction, not a measurement): "
                         f"{100 * math.expm1(found['total']):+.1f}% in all; {shown}")
            if "moves" in found:
                return lines + _taken(found["moves"])
            return lines + ([_uncertainty(found)] if "sd" in found else [])
    return lines


def _taken(moves: dict[str, list]) -> list[str]:
    """The prior's prediction of each one-option move, with its 2 sd, and what the search took of
    it (model/fit.py): each move where it spoke, shrunk by its uncertainty, summed."""
    parts = [f"{move.split(':', 1)[-1]} {100 * math.expm1(mean):+.1f}% +/- {100 * math.expm1(2 * sd):.1f}%"
             + (" taken" if took else " abstained") for move, (mean, sd, took) in sorted(moves.items())]
    taken = sum(took for _, _, took in moves.values())
    head = (f"    as the search took it, option by option (2 sd; it abstains within its uncertainty or the "
            f"noise, 2%): {100 * math.expm1(taken):+.1f}% in all, each shrunk by its uncertainty, "
            "then scaled to the measurements" if taken else
            "    it abstained on every option (each within its uncertainty or the noise, 2%), so the "
            "search took no effect from it")
    return [head, "      " + "; ".join(parts)]


def _uncertainty(found: dict[str, Any]) -> str:
    """The prior's time change with its 2 sd, and whether it spoke (prior.confident) or abstained."""
    shown = f"{100 * math.expm1(found['mean']):+.1f}% +/- {100 * math.expm1(2 * found['sd']):.1f}% (2 sd)"
    if found["confident"]:
        return f"    its uncertainty: {shown}; beyond it, so the search took the prediction"
    return (f"    it abstained: {shown} is within its uncertainty or the noise (2%), so the search "
            "took no effect from it")
