"""The search step of one target: its flag space, its strategy (with the prior), the search.

`target_space` builds the space the compilers accept and narrows it to --dimensions;
`search_target` starts the strategy (warm-started from other targets' searches, steered by the
prior when it knows the space) and runs the search loop (loop.py) until the budget, the
strategy, the time or Ctrl-C ends it; `predicted` is what the prior said of the winner.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from compileiq_build.build.space import FlagSpace, Prober, build_space, config_key
from compileiq_build.decide.selection import Winner, verdict_counts
from compileiq_build.errors import CompileIQError
from compileiq_build.evaluate.evaluator import Evaluator
from compileiq_build.notes import Notes
from compileiq_build.options import TuneOptions
from compileiq_build.project.manifest import Project, Target
from compileiq_build.results.progress import Reporter
from compileiq_build.search.history import history, transfer
from compileiq_build.search.loop import Proposals, run_search
from compileiq_build.search.prior import Prior, confident, for_space
from compileiq_build.search.strategies import Candidate, Context, Strategy, Trial, make_strategy
from compileiq_build.search.strategies.model.features import config_features
from compileiq_build.search.strategies.model.fit import prior_offset


def target_space(target: Target, tree_project: Project, arch: str, options: TuneOptions, probe: Path,
                 notes: Notes) -> FlagSpace:
    """The options the compilers accept for the target, narrowed to --dimensions."""
    compilers = {lang: (c.path, c.version) for lang, c in tree_project.compilers.items()}
    extra = {"CUDA": [f"-arch=sm_{arch}"] if arch else []}
    space = build_space(target.languages, compilers, Prober(probe, extra), options.allow_numerics_change,
                        options.max_stage, options.allow_host_specific)
    if options.dimensions:
        space = _only(space, options.dimensions, target)
    for r in space.rejected:
        notes.note(f"dropped {r.flag}: {r.reason}")
    if space.excluded_host_specific:
        notes.note(f"{target.name}: left out {', '.join(space.excluded_host_specific)}: "
                   "binaries would run only on CPUs like this one (--allow-host-specific "
                   "tries them)")
    return space


def check_dimensions(targets: Sequence[Target], options: TuneOptions) -> None:
    """Before anything is built: each name of --dimensions is in each chosen target's space as
    the options allow it (the compilers' probes, later, may still drop one)."""
    if not options.dimensions:
        return
    for target in targets:
        catalog = build_space(target.languages, {}, None, options.allow_numerics_change,
                              options.max_stage, options.allow_host_specific)
        _only(catalog, options.dimensions, target)


def _only(space: FlagSpace, names: Sequence[str], target: Target) -> FlagSpace:
    """The space of the dimensions --dimensions names, each known to it."""
    known = {d.name for d in space.dimensions} | {d.key for d in space.dimensions}
    unknown = [n for n in names if n not in known]
    left_out = {n for k in space.excluded_host_specific for n in (k, k.split(":", 1)[1])}
    host = [n for n in unknown if n in left_out]
    if host:
        raise CompileIQError(f"--dimensions names {', '.join(host)}, whose flags make binaries "
                             "that run only on CPUs like this one; add --allow-host-specific "
                             "to tune it.")
    numerics = [n for n in unknown if n in {m for k in space.excluded_numerics for m in (k, k.split(":")[1])}]
    if numerics:
        raise CompileIQError(f"--dimensions names {', '.join(numerics)}, which changes floating-point "
                             "results; add --allow-numerics-change to tune it.")
    if unknown:
        raise CompileIQError(f"--dimensions names {', '.join(unknown)}, not in the space of "
                             f"{target.name}: {', '.join(sorted(d.name for d in space.dimensions))} "
                             "(`python -m compileiq_build space` lists them)")
    return FlagSpace(tuple(d for d in space.dimensions if d.name in names or d.key in names),
                     space.rejected, space.excluded_numerics, space.excluded_host_specific)


def search_target(evaluator: Evaluator, space: FlagSpace, options: TuneOptions,
                  load_prior: Callable[[], Prior | None], report: Reporter) -> Proposals:
    """Run the target's search until the budget, the strategy or the evaluator's clock (time,
    Ctrl-C) ends it.  Returns the proposals, which say how the search ended."""
    name = evaluator.target.name
    warm = transfer(evaluator)
    model = options.strategy == "model"
    if warm and model:
        report.note(f"{name}: the search starts from {len(warm)} evaluations of other targets in the store")
    strategy, prior = search_strategy(options.strategy, target_seed(options.seed, name), space,
                                      evaluator.baseline_features, load_prior, warm)
    if model:
        used = prior.label if prior else (
            "none: it knows CUDA options only" if not for_space(space) else
            "off (--no-prior)" if not options.prior else
            "none: the baseline's machine code has no features" if not evaluator.baseline_features else
            "none: it could not be loaded (see the warning)")
        report.note(f"{name}: prior {used}")
        evaluator.store.update_session(evaluator.session, "prior_used", {name: used})
    proposals = Proposals(strategy, space, lambda: history(evaluator), options.budget,
                          evaluator.baseline.digest, options.max_candidates,
                          options.compile_ahead, evaluator.clock, evaluator.baseline_features)
    # CPU benchmarks are measured only once the compilers are done: they share the cores.
    run_search(evaluator, evaluator.workers, proposals, report, overlap="CUDA" in evaluator.target.languages)
    return proposals


def target_seed(seed: int, target: str) -> int:
    """The seed of one target's draws: `--seed` mixed with the target's name, so that the draws
    differ between targets (live, every kernel's random run began with one same seven-option
    draw, which happened to lie near two kernels' best) and a run is repeated by its seed."""
    return seed * 2**32 + zlib.crc32(target.encode())


def search_strategy(name: str, seed: int, space: FlagSpace, baseline_features: Mapping[str, float],
                    load_prior: Callable[[], Prior | None], transfer: Sequence[Trial] = ()
                    ) -> tuple[Strategy, Prior | None]:
    """The strategy `tune` searches with, and the prior it takes: the model-guided search loads
    one (`load_prior`) where the prior knows the space's options and the baseline's code has
    features; `transfer`: other targets' evaluations, which it starts from."""
    wanted = name == "model" and for_space(space) and bool(baseline_features)
    prior = load_prior() if wanted else None
    return make_strategy(name, seed, transfer, prior), prior


def search_notes(evaluator: Evaluator, proposals: Proposals, notes: Notes) -> None:
    """How the search ended, what it measured, what it compiled ahead."""
    name = evaluator.target.name
    notes.note(f"{name}: {proposals.finished}")
    searched = evaluator.results.outcomes("search")
    notes.note(f"{name}: {len(searched)} candidates measured ({verdict_counts(searched)})")
    if ahead := proposals.ahead:
        codes = [c for c in ahead.values() if c]
        notes.note(f"{name}: {len(ahead)} configurations compiled ahead, "
                   f"{len(set(codes))} distinct machine codes "
                   f"({len(ahead) - len(codes)} did not build)")


def predicted(prior: Prior | None, known: Sequence[Candidate], baseline_features: Mapping[str, float],
              space: FlagSpace, decision: Winner) -> dict[str, object]:
    """What the prior predicted of the winner, option by option (pred_contrib), for the report:
    with its sd and whether it was `confident`, and, as the search took it (model/fit.py), of each
    of the winner's one-option moves: [mean, sd, what the search took] (0 where it abstained)."""
    ours = [c for c in known if config_key(space.full_config(c.config)) == decision.config_key]
    if prior is None or not ours or not baseline_features:
        return {}
    config = space.full_config(ours[0].config)
    features = next((c.features for c in ours if c.features), None)
    contributions = prior.contributions(config, features, baseline_features)
    mean, sd = prior.predict_interval([config], [features], baseline_features, abstain=False)
    # As the search's fit reads each move (model/fit.py): the same features, the same offset.
    context = Context(space, known=list(known), baseline_features=baseline_features)
    base = space.default_config()
    singles = [{**base, k: v} for k, v in config.items() if v != base[k]]
    m, s = prior.predict_interval(singles, config_features(context, singles, totals=False), baseline_features,
                                  abstain=False)
    moves = {config_key(c): [float(a), float(b), float(t)]
             for c, a, b, t in zip(singles, m, s, prior_offset(prior, context, singles), strict=True)}
    return {"config": decision.config_key, "prior": prior.label, "total": sum(contributions.values()),
            "contributions": contributions, "mean": float(mean[0]), "sd": float(sd[0]),
            "confident": bool(confident(mean, sd)[0]), "moves": moves}
