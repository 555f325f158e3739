"""Stage 4: turn stored samples into per-workload estimates, and pick winners."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from compileiq_build.decide.stats import RatioEstimate, geometric_mean, ratio_estimate, speedup_text
from compileiq_build.store.database import INTERRUPTED, MEASURED, EvaluationRow, Store

FINALISTS = 3  # candidates re-measured per run, best first

# A workload's noise: the sd of its log paired ratio, from the median of successive differences
# pooled over the target's search evaluations (`search_noise`).  Racing (racing.py) stops
# candidates against it, and minimizing keeps an option only for a gain beyond its zone.
NORMAL_STEP = 0.954  # median |x - y| / sd for independent normal x, y: 0.6745 * sqrt(2)
NOISE_MIN = 8  # successive differences of a workload before its noise is trusted
NOISE_ZONE = 1.05  # the indifference zone's width in units of the workload's noise
ZONE_FLOOR = 0.005  # the narrowest zone, --precision's default: a workload of unknown noise
NOISY_ZONE = 0.02  # a zone this wide hides the gains the tool is for: named where nothing ships


@dataclass(frozen=True)
class Outcome:
    """One evaluation, summarised: valid, and its ratio to the baseline per workload."""

    evaluation: EvaluationRow
    estimates: dict[str, RatioEstimate]
    error: str  # first failure, empty when valid

    @property
    def valid(self) -> bool:
        return not self.error and bool(self.estimates)

    @property
    def ratio(self) -> float | None:
        return geometric_mean([e.ratio for e in self.estimates.values()]) if self.valid else None

    @property
    def faster(self) -> bool:
        """Faster beyond noise on every workload."""
        return self.valid and all(e.faster for e in self.estimates.values())

    @property
    def spread(self) -> float | None:
        """Relative half-width of the interval, averaged over workloads: the measurement's
        resolution.  None without an interval (invalid, same code as the baseline, one pair)."""
        if not self.valid or any(e.pairs < 2 for e in self.estimates.values()):
            return None
        return sum((e.high - e.low) / (2 * e.ratio) for e in self.estimates.values()) / len(self.estimates)

    @property
    def verdict(self) -> str:
        if not self.valid:
            return "invalid"
        if self.faster:
            return "faster"
        if any(e.slower for e in self.estimates.values()):
            return "slower"
        return "neutral"


SAME_AS_BASELINE = 0  # `same_as` of a candidate whose machine code is the baseline's


def verdict_counts(measured: Sequence[Outcome]) -> str:
    """'2 faster, 5 neutral, 3 slower; mean pairs per workload: faster 7.5, neutral 4.2, slower
    2.0' over the candidates measured, where candidates of code measured before took none."""
    pairs: dict[str, list[float]] = {}
    for o in measured:
        if o.evaluation.same_as is None and o.estimates:
            pairs.setdefault(o.verdict, []).append(
                sum(e.pairs for e in o.estimates.values()) / len(o.estimates))
    counts = {v: sum(o.verdict == v for o in measured) for v in sorted({o.verdict for o in measured})}
    text = ", ".join(f"{n} {v}" for v, n in counts.items()) or "none"
    if pairs:
        text += "; mean pairs per workload: " + ", ".join(
            f"{v} {sum(p) / len(p):.1f}" for v, p in sorted(pairs.items()))
    return text


def summarize(store: Store, evaluation: EvaluationRow) -> Outcome:
    if evaluation.status != MEASURED:
        return Outcome(evaluation, {}, evaluation.reason or evaluation.status)
    if evaluation.same_as == SAME_AS_BASELINE:
        return Outcome(evaluation, {"(same code as the baseline)": RatioEstimate(1.0, 1.0, 1.0, 0)}, "")
    if evaluation.same_as is not None:
        twin = summarize(store, store.evaluation(evaluation.same_as))
        return Outcome(evaluation, twin.estimates, twin.error)
    candidate: dict[str, dict[int, float]] = {}
    baseline: dict[str, dict[int, float]] = {}
    for workload, role, rep, cost, error in store.samples(evaluation.id):
        if error:
            if role == "candidate":
                return Outcome(evaluation, {}, f"{workload}: {error}")
            continue
        (candidate if role == "candidate" else baseline).setdefault(workload, {})[rep] = cost or 0.0
    estimates = {}
    for workload, cand in sorted(candidate.items()):
        reps = sorted(set(cand) & set(baseline.get(workload, {})))
        if reps:
            estimates[workload] = ratio_estimate([cand[r] for r in reps],
                                                 [baseline[workload][r] for r in reps])
    return Outcome(evaluation, estimates, "" if estimates else "no paired samples")


@dataclass(frozen=True)
class WorkloadGain:
    workload: str
    estimate: RatioEstimate


@dataclass(frozen=True)
class Dropped:
    """An option of the validated winner that the shipped flags leave out (minimize.py)."""

    option: str  # "CUDA:restrict=on"
    why: str


@dataclass(frozen=True)
class Winner:
    target: str
    arch_keys: dict[str, str]
    config_key: str
    flags: dict[str, tuple[str, ...]]
    gains: tuple[WorkloadGain, ...]
    evaluations: int  # how many candidates were measured for this target
    pending: tuple[str, ...] = ()  # configurations faster in the search, not re-measured yet
    dropped: tuple[Dropped, ...] = ()  # options of the validated configuration left out, and why
    validated: str = ""  # the configuration re-measured, of which `config_key` is what ships
    evidence: int = 0  # the evaluation whose samples give `gains`
    unchecked: tuple[str, ...] = ()  # shipped options whose removal no minimizing step checked

    @property
    def speedup(self) -> float:
        return 1.0 / geometric_mean([g.estimate.ratio for g in self.gains])


def finalists(outcomes: Sequence[Outcome], count: int | None = None) -> list[Outcome]:
    """The best candidates that were faster everywhere, best first (one per configuration);
    all of them unless `count` is given."""
    best: dict[str, Outcome] = {}
    for o in outcomes:
        if o.faster:
            key = o.evaluation.config_key
            if key not in best or (o.ratio or 1.0) < (best[key].ratio or 1.0):
                best[key] = o
    return sorted(best.values(), key=lambda o: o.ratio or 1.0)[:count]


@dataclass(frozen=True)
class NoWinner:
    target: str
    arch_keys: dict[str, str]
    reason: str
    pending: tuple[str, ...] = ()  # configurations faster in the search, not re-measured yet


@dataclass(frozen=True)
class TargetResults:
    """One target's stored results on one set of architectures: the store, the target's name
    and its architecture keys, which every question below asks together."""

    store: Store
    target: str
    arch_keys: dict[str, str]

    def evaluations(self, phase: str | None = None) -> list[EvaluationRow]:
        return self.store.evaluations(self.target, self.arch_keys, phase)

    def outcomes(self, phase: str) -> list[Outcome]:
        return outcomes(self.store, self.target, self.arch_keys, phase)

    def decide(self) -> Winner | NoWinner:
        return decide(self.store, self.target, self.arch_keys)

    def pending_validation(self) -> list[Outcome]:
        return pending_validation(self.store, self.target, self.arch_keys)

    def noise(self) -> dict[str, float]:
        return search_noise(self.store, self.target, self.arch_keys)


def log_order(searched: Sequence[Outcome]) -> list[Outcome]:
    """A target's search outcomes in the order the log showed them: as they finished (with
    several workers, not the order they started in, which is the store's)."""
    return sorted(searched, key=lambda o: (o.evaluation.finished is None, o.evaluation.finished or 0.0,
                                           o.evaluation.id))


def evaluation_numbers(searched: Sequence[Outcome]) -> dict[int, int]:
    """Store id -> the number the progress counter gives each evaluation of a target's search
    (`searched`: all of it, earlier runs' too). Candidates of a code measured before, or of
    the baseline's, spend no evaluation and have none."""
    own = [o for o in log_order(searched) if o.evaluation.same_as is None]
    return {o.evaluation.id: number for number, o in enumerate(own, 1)}


def outcomes(store: Store, target: str, arch_keys: dict[str, str], phase: str) -> list[Outcome]:
    return [summarize(store, r) for r in store.evaluations(target, arch_keys, phase)
            if r.status != INTERRUPTED]


def remeasured(store: Store, target: str, arch_keys: dict[str, str]) -> list[Outcome]:
    """What was measured after the search: validations and minimizing steps."""
    return [o for phase in ("validate", "minimize") for o in outcomes(store, target, arch_keys, phase)]


def pending_validation(store: Store, target: str, arch_keys: dict[str, str]) -> list[Outcome]:
    """The search measurements of `decide`'s pending configurations, best first: what the next
    validation re-measures."""
    pending = set(decide(store, target, arch_keys).pending)
    return [f for f in finalists(outcomes(store, target, arch_keys, "search"))
            if f.evaluation.config_key in pending]


def decide(store: Store, target: str, arch_keys: dict[str, str]) -> Winner | NoWinner:
    """From stored data alone: the best search finalist that also held up when re-measured.

    Every finalist counts, not only the best few: a validated winner stays the answer until
    one ranked above it is validated too, however many unvalidated ones are found after it.
    Those are named in `pending`."""
    searched = outcomes(store, target, arch_keys, "search")
    checks = {o.evaluation.config_key: o for o in outcomes(store, target, arch_keys, "validate")}
    noise = search_noise(store, target, arch_keys)
    pending: list[str] = []
    ranked = finalists(searched)
    for finalist in ranked:
        row = finalist.evaluation
        check = checks.get(row.config_key)
        if check is None:
            pending.append(row.config_key)
        elif beats_baseline(check, noise):
            shipped, dropped, unchecked = minimal(store, target, arch_keys, check, noise)
            flags = {lang: tuple(f) for lang, f in shipped.evaluation.flags.items() if f}
            gains = tuple(WorkloadGain(w, e) for w, e in sorted(shipped.estimates.items()))
            return Winner(target, arch_keys, shipped.evaluation.config_key, flags, gains, len(searched),
                          tuple(pending), tuple(dropped), row.config_key,
                          shipped.evaluation.same_as or shipped.evaluation.id, unchecked)
    failed = [f.evaluation.config_key for f in ranked if f.evaluation.config_key in checks]
    if pending and failed:
        # Not a contradiction of the notes that said so: those that failed, then the others.
        reason = (f"{len(failed)} candidates faster in the search did not hold up when re-measured "
                  f"({', '.join(failed)}); {len(pending)} more were faster in the search and are not "
                  f"validated yet ({len(searched)} measured): run tune again to re-measure the next "
                  f"{min(FINALISTS, len(pending))}")
    elif pending:
        reason = (f"{len(pending)} candidates were faster in the search but are not validated yet "
                  f"({len(searched)} measured); run tune again to re-measure them")
    elif ranked:
        reason = (f"none of the {len(ranked)} candidates faster in the search held up when re-measured "
                  f"({len(searched)} measured)")
    else:
        reason = f"no candidate beat the baseline beyond noise ({len(searched)} measured)"
    return NoWinner(target, arch_keys, reason + noisy_benchmarks(noise, arch_keys), tuple(pending))


def quieter(arch_keys: Mapping[str, str]) -> str:
    """What lets smaller gains ship: a CUDA target's benchmark can time the kernels alone, a CPU
    target's needs its cores to itself (the demo's host targets were told to time GPU work)."""
    alone = "timing the GPU work alone" if "CUDA" in arch_keys else "no other load on the machine's cores"
    return f"quieter runs (more repetitions per run, a larger input, or {alone}) let smaller gains ship"


def noisy_zones(noise: Mapping[str, float]) -> list[tuple[str, float]]:
    """The workloads whose noise hides gains of `NOISY_ZONE` or more, with their zones."""
    return sorted((w, zone(noise, w)) for w in noise if zone(noise, w) >= NOISY_ZONE)


def gains_hidden(zones: Sequence[tuple[str, float]], arch_keys: Mapping[str, str]) -> str:
    named = ", ".join(f"{w} {z:.1%}" for w, z in zones)
    return f"a gain ships only beyond its benchmark's noise, here {named}: {quieter(arch_keys)}"


def noisy_benchmarks(noise: Mapping[str, float], arch_keys: Mapping[str, str]) -> str:
    """Where no candidate ships: the benchmarks whose noise hides gains of `NOISY_ZONE` or more,
    with what the user can do (live, a whole-program time of Rodinia's lud varied by 12%, and a
    3% gain measured over 23 pairs could not ship)."""
    zones = noisy_zones(noise)
    return f"; {gains_hidden(zones, arch_keys)}" if zones else ""


def search_noise(store: Store, target: str, arch_keys: dict[str, str]) -> dict[str, float]:
    """Each workload's noise (module constants), from the target's measured search evaluations
    of their own code; a workload with fewer than `NOISE_MIN` successive differences has none."""
    steps: dict[str, list[float]] = {}
    for row in store.evaluations(target, arch_keys, "search"):
        if row.status != MEASURED or row.same_as is not None:
            continue
        paired: dict[str, dict[int, dict[str, float]]] = {}
        for workload, role, rep, cost, error in store.samples(row.id):
            if cost and not error:
                paired.setdefault(workload, {}).setdefault(rep, {})[role] = cost
        for workload, reps in paired.items():
            logs = [math.log(p["candidate"] / p["baseline"]) for _, p in sorted(reps.items())
                    if len(p) == 2]
            steps.setdefault(workload, []).extend(abs(a - b) for a, b in pairwise(logs))
    return {w: statistics.median(d) / NORMAL_STEP for w, d in steps.items() if len(d) >= NOISE_MIN}


def zone(noise: Mapping[str, float], workload: str) -> float:
    """The gain a workload's noise hides: `NOISE_ZONE` x its noise, at least `ZONE_FLOOR`."""
    return max(ZONE_FLOOR, NOISE_ZONE * noise.get(workload, 0.0))


def gain_and_zone(o: Outcome, noise: Mapping[str, float]) -> tuple[float, float]:
    """A valid outcome's gain in all (1 - its geometric-mean ratio over the workloads) and the
    gain the workloads' noise hides in all (their zones' mean): for one workload, its own."""
    return 1 - (o.ratio or 1.0), statistics.fmean(zone(noise, w) for w in o.estimates)


def beats_baseline(o: Outcome, noise: Mapping[str, float]) -> bool:
    """Whether a re-measured configuration holds up: faster than the baseline beyond noise on
    every workload (each interval below 1), by a gain in all beyond the `zone` in all: the
    baseline is the step without its last option, and that option, like any, ships only for a
    gain beyond the noise.  In all, not on every workload: ggml's vector flash attention,
    re-measured 2.1% faster at a 16384-token KV and 0.2% at 4096 (both intervals below 1), is
    faster everywhere and by 1.2% in all, and the zone of 0.5% on each workload kept it out."""
    if not o.faster:
        return False
    gain, hidden = gain_and_zone(o, noise)
    return gain > hidden


def holds_without(step: Outcome, parent: Outcome, noise: Mapping[str, float]) -> bool:
    """Whether a configuration with one option fewer serves as well: still faster than the
    baseline beyond noise on every workload, and not measurably slower than the configuration it
    was reduced from: on every workload its interval reaches that one's estimate x (1 + `zone`).
    An option ships only for a gain beyond the noise; against the estimate alone, a parent
    measured lucky kept an option worth nothing (the demo's matmul: -falign-loops=32 in one run
    of two).  The step need not beat the baseline by the zone as well (`beats_baseline`): the
    parent did, and a lucky parent would otherwise keep the option that the step shows is worth
    nothing (the demo's blur: -falign-loops=32 again)."""
    return step.faster and all(
        w in step.estimates and step.estimates[w].low <= e.ratio * (1 + zone(noise, w))
        for w, e in parent.estimates.items())


def gains_text(o: Outcome) -> str:
    """Each workload's speedup over the project's own flags, with its 95% interval."""
    return ", ".join(f"{w} {speedup_text(x)}" for w, x in sorted(o.estimates.items()))


def _unchecked(options: Sequence[str], tried: set[str]) -> tuple[str, ...]:
    """The options whose removal from this set no measurement in `tried` (keys) checked; a
    single option is checked by the validation itself: without it the baseline remains."""
    return tuple(o for o in options if len(options) > 1
                 and " ".join(k for k in options if k != o) not in tried)


def minimal(store: Store, target: str, arch_keys: dict[str, str], check: Outcome,
            noise: Mapping[str, float]) -> tuple[Outcome, list[Dropped], tuple[str, ...]]:
    """The validated configuration less the options its minimizing steps found it can do
    without, why each was left out (the steps are followed in the order they were taken), and
    the options it keeps whose removal no step checked.  Where minimizing stopped before it
    checked them, the smallest measured configuration of checked options that serves as well
    ships instead (`_smallest_checked`); the unchecked options remain only without one."""
    steps = outcomes(store, target, arch_keys, "minimize")
    current, dropped = check, []
    while step := next((s for s in steps if s.evaluation.parent == current.evaluation.config_key
                        and holds_without(s, current, noise)), None):
        gone = set(current.evaluation.config_key.split()) - set(step.evaluation.config_key.split())
        why = ("the machine code is the same without it" if step.evaluation.same_as is not None
               else "not slower beyond noise without it: " + gains_text(step))
        dropped += [Dropped(option, why) for option in sorted(gone)]
        current = step
    kept = current.evaluation.config_key.split()
    tried = {s.evaluation.config_key for s in steps if s.evaluation.parent == current.evaluation.config_key}
    unchecked = _unchecked(kept, tried)
    if unchecked and (smaller := _smallest_checked(store, target, arch_keys, current, noise)) is not None:
        gone = set(kept) - set(smaller.evaluation.config_key.split())
        why = (f"minimizing stopped before its removal was checked; {smaller.evaluation.config_key}, "
               + ("without it, compiles to the same machine code" if _same_code(smaller, current)
                  else "measured without it, serves as well: " + gains_text(smaller)))
        return smaller, [*dropped, *(Dropped(option, why) for option in sorted(gone))], ()
    return current, dropped, unchecked


def _smallest_checked(store: Store, target: str, arch_keys: dict[str, str],
                      current: Outcome, noise: Mapping[str, float]) -> Outcome | None:
    """Of the configurations measured (search, validation, minimizing) whose options are some of
    `current`'s: the one of fewest options that serves as well (its machine code is `current`'s,
    or `holds_without`) and whose every option's removal was measured too, best first among
    equals; None if there is none.  (The same code serves by identity, as a passenger does in
    minimizing: two measurements of it differ by noise alone, which under load took a CPU test's
    interval past the zone.)"""
    measured = [o for o in (*outcomes(store, target, arch_keys, "search"),
                            *remeasured(store, target, arch_keys)) if o.valid]
    keys = {o.evaluation.config_key for o in measured}
    options = set(current.evaluation.config_key.split())
    fits = [o for o in measured if (own := o.evaluation.config_key.split()) and set(own) < options
            and (_same_code(o, current) or holds_without(o, current, noise)) and not _unchecked(own, keys)]
    return min(fits, key=lambda o: (len(o.evaluation.config_key.split()), o.ratio or 1.0), default=None)


def _same_code(a: Outcome, b: Outcome) -> bool:
    return bool(a.evaluation.digest) and a.evaluation.digest == b.evaluation.digest


@dataclass(frozen=True)
class Portable:
    """Flags for builds that target several architectures at once."""

    target: str
    config_key: str
    flags: dict[str, tuple[str, ...]]
    ratios: dict[str, float]  # architecture -> geometric-mean cost ratio measured there


def arch_sets(store: Store, target: str) -> list[dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for row in store.evaluations(target):
        found.setdefault(repr(sorted(row.arch_keys.items())), row.arch_keys)
    return list(found.values())


def pairs(store: Store) -> list[tuple[str, dict[str, str]]]:
    """Every (target, architecture) the store holds evaluations of."""
    targets = sorted({r.target for r in store.evaluations()})
    return [(target, arch) for target in targets for arch in arch_sets(store, target)]


def decisions(store: Store) -> list[Winner | NoWinner]:
    """What the store decides for every (target, architecture) it holds."""
    return [decide(store, target, arch) for target, arch in pairs(store)]


def merged(*groups: Iterable[Winner | NoWinner]) -> tuple[list[Winner], list[NoWinner]]:
    """Decisions of several sources, one per (target, architectures): the first group's that
    names it; the winners, then the rest."""
    found: dict[tuple[str, str], Winner | NoWinner] = {}
    for group in groups:
        for d in group:
            found.setdefault((d.target, repr(sorted(d.arch_keys.items()))), d)
    return ([d for d in found.values() if isinstance(d, Winner)],
            [d for d in found.values() if isinstance(d, NoWinner)])


def _measured(store: Store, target: str, arch: dict[str, str], key: str) -> Outcome | None:
    """The re-measurement of a configuration if there is one, else its search measurement."""
    for phase in ("validate", "search"):
        for o in outcomes(store, target, arch, phase):
            if o.evaluation.config_key == key and o.valid:
                return o
    return None


def portable_set(stores: Sequence[Store], winners: Sequence[Winner]) -> list[Portable]:
    """Per target tuned on several architectures: among the architectures' winners, the
    configuration measured on every one of them and slower beyond noise on none, best
    geometric mean first.  Targets with no such configuration get no portable set."""
    result = []
    for target in sorted({w.target for w in winners}):
        archs = [(store, arch) for store in stores for arch in arch_sets(store, target)]
        if len({repr(sorted(a.items())) for _, a in archs}) < 2:
            continue
        best: Portable | None = None
        for w in (w for w in winners if w.target == target):
            ratios = {}
            for store, arch in archs:
                o = _measured(store, target, arch, w.config_key)
                if o is None or o.ratio is None or any(e.slower for e in o.estimates.values()):
                    break
                ratios[", ".join(sorted(arch.values()))] = o.ratio
            else:
                candidate = Portable(target, w.config_key, w.flags, ratios)
                if best is None or geometric_mean(list(ratios.values())) < geometric_mean(
                        list(best.ratios.values())):
                    best = candidate
        if best is not None:
            result.append(best)
    return result
