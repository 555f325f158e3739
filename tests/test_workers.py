"""Workers: several at once through the search pipeline, GPU selection, and Ray.

Real cmake, ninja and g++ on the C++ fixture project.  Without GPUs, several workers
are CPU workers here; on a GPU machine each would own a GPU, which the pipeline does
not see: it only hands out proposals and measures on whichever worker built them.
"""

from __future__ import annotations

import itertools
import sqlite3
import subprocess
import sys
from dataclasses import replace

import pytest
from conftest import cxx_evaluator

from compileiq_build.build.space import DEFAULT, Dimension, FlagSpace, config_key
from compileiq_build.build.trees import BuildTree
from compileiq_build.decide.clock import Clock
from compileiq_build.errors import CompileIQError
from compileiq_build.machine.environment import Gpu
from compileiq_build.options import TuneOptions
from compileiq_build.project.manifest import load_project
from compileiq_build.project.workspace import Workspace
from compileiq_build.results.progress import Reporter
from compileiq_build.run.launch import measuring_gpus
from compileiq_build.run.worker import LocalWorker
from compileiq_build.search.history import history, trials
from compileiq_build.search.loop import Proposals, run_search, scout_jobs
from compileiq_build.search.strategies import (
    Candidate,
    Context,
    Exhaustive,
    Proposal,
    RandomSearch,
    Stop,
    Trial,
)
from compileiq_build.search.strategies.model import ModelGuided, screening_moves
from compileiq_build.search.target import target_space
from compileiq_build.store.database import COMPILED, SCOUT

SPACE = FlagSpace((Dimension("CXX", "O", ("1", "2", "3"), "-O{v}"),
                   Dimension("CXX", "funroll", ("on",), "-funroll-loops")))


@pytest.mark.parametrize("overlap", [False, True])
def test_two_workers_share_the_search_without_repeats(cxx_project, configure, overlap):
    evaluator, store = cxx_evaluator(cxx_project, configure, [2, 1])
    strategy = Exhaustive()
    proposals = Proposals(strategy, SPACE, lambda: history(evaluator), budget=100)
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap)
    rows = store.evaluations("saxpy", phase="search")
    keys = [r.config_key for r in rows]
    assert len(keys) == SPACE.size - 1 == len(set(keys))  # every candidate once, the baseline never
    assert {r.worker for r in rows} == {"w0", "w1"}
    assert all(r.status == "measured" for r in rows)
    assert proposals.finished.startswith("strategy exhaustive stops")
    # Every evaluation was measured in 2 candidate/baseline pairs (Sampling(2, 2)), except those
    # whose machine code was measured before: they ran nothing.
    measured = [r for r in rows if r.same_as is None]
    assert measured
    for r in rows:
        roles = [role for _, role, *_ in store.samples(r.id)]
        pairs = 0 if r.same_as is not None else 2
        assert roles.count("candidate") == roles.count("baseline") == pairs
    # What the model-guided search reads as the measured noise: each measured interval's half-width.
    spreads = {config_key(t.config): t.spread for t in trials(evaluator)}
    for r in measured:
        assert 0 <= spreads[r.config_key] < 1
    store.close()


def test_the_baseline_builds_on_every_core_and_candidates_on_their_trees_share(cxx_project, configure,
                                                                               monkeypatch):
    # The baseline's first build is the whole project, alone: live, ggml's took 615 s at a
    # candidate tree's -j4 of 16 cores, against 240 s at Ninja's own parallelism.
    jobs: dict[str, list[int | None]] = {}
    build = BuildTree.build

    def recorded(tree, ninja_targets, timeout, **kwargs):
        jobs.setdefault(tree.path.name, []).append(kwargs.get("jobs"))
        return build(tree, ninja_targets, timeout, **kwargs)

    monkeypatch.setattr(BuildTree, "build", recorded)
    evaluator, store = cxx_evaluator(cxx_project, configure, [2])  # candidate trees at -j1
    evaluator.build({"CXX": ("-O1",)}, evaluator.workers[0], 0)
    assert jobs["baseline"] == [None]
    assert jobs["w0-0"] == [1]
    store.close()


def test_the_budget_counts_candidates_in_flight(cxx_project, configure):
    evaluator, store = cxx_evaluator(cxx_project, configure, [2, 2])
    proposals = Proposals(RandomSearch(3), SPACE, lambda: history(evaluator), budget=3)
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap=True)
    assert len(store.evaluations("saxpy", phase="search")) == 3
    assert proposals.finished == "budget of 3 evaluations reached"
    store.close()


def test_a_candidate_being_measured_counts_once_against_the_budget():
    # The store records an evaluation when its measuring begins, while it is still in flight:
    # counted twice, it kept a second GPU idle at the end of a search.
    recorded: list[Trial] = []
    proposals = Proposals(Exhaustive(), SPACE, lambda: (list(recorded), []), budget=3)
    first, second = proposals.next(may_wait=False), proposals.next(may_wait=False)
    recorded.append(Trial(first.config, None, False))
    third = proposals.next(may_wait=False)
    assert third is not None and third.phase == "exhaustive"
    assert len({config_key(p.config) for p in (first, second, third)}) == 3
    assert proposals.next(may_wait=False) is None  # 1 recorded + 2 in flight: the budget


def test_a_stop_leaves_compiled_candidates_unmeasured(cxx_project, configure):
    evaluator, store = cxx_evaluator(cxx_project, configure, [2])
    # The time is up once the first candidate was measured.
    clock = Clock(60, now=lambda: 100.0 if store.evaluations("saxpy", phase="search") else 0.0)
    proposals = Proposals(Exhaustive(), SPACE, lambda: history(evaluator), budget=100, clock=clock)
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap=True)
    assert len(store.evaluations("saxpy", phase="search")) == 1
    assert proposals.finished == "time limit reached"
    store.close()


def _gpu(index: int, cc: str) -> Gpu:
    return Gpu(index, "GPU", f"GPU-{index}", "580", cc, "", "", "", "")


def test_gpu_selection(monkeypatch):
    gpus, notes = [_gpu(0, "9.0"), _gpu(1, "9.0"), _gpu(2, "8.0")], Reporter(quiet=True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [g.index for g in measuring_gpus(gpus, (), notes)] == [0, 1]  # the first one's architecture
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,GPU-2")
    assert [g.index for g in measuring_gpus(gpus, (), notes)] == [1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with pytest.raises(CompileIQError, match="CUDA_VISIBLE_DEVICES=7 leaves none"):
        measuring_gpus(gpus, (), notes)
    assert [g.index for g in measuring_gpus(gpus, (2, 0), notes)] == [2]
    with pytest.raises(CompileIQError, match="--gpus names 5; this machine has GPUs 0, 1, 2"):
        measuring_gpus(gpus, (5,), notes)


def test_gpus_option_is_checked(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(tmp_path), "--gpus", "0,x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "expected GPU numbers separated by commas" in proc.stderr


def test_worker_names_its_gpu_to_the_benchmarks():
    worker = LocalWorker("gpu1", BuildTree.__new__(BuildTree), [], _gpu(1, "9.0"))
    assert worker.env == {"CUDA_VISIBLE_DEVICES": "GPU-1"}


def test_tune_on_a_local_ray_cluster(cxx_project, configure):
    pytest.importorskip("ray")
    build = cxx_project / "build"
    configure(cxx_project, build)
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build), "--ray", "local",
                           "--strategy", "exhaustive", "--dimensions", "O", "--repeats", "2",
                           "--max-repeats", "2"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    db = sqlite3.connect(build / "compileiq" / "results.sqlite")
    rows = db.execute("SELECT config_key, status, worker FROM evaluations WHERE phase='search'").fetchall()
    space = target_space(load_project(build).target("saxpy"), load_project(build), "", TuneOptions(),
                         Workspace(build).probe, Reporter(quiet=True))
    values = next(d.values for d in space.dimensions if d.name == "O")
    assert sorted(k for k, _, _ in rows) == sorted(config_key({"CXX:O": v}) for v in values)
    assert {s for _, s, _ in rows} == {"measured"}
    (worker,) = {w for _, _, w in rows}
    assert worker.startswith("ray:") and worker.endswith("/cpu")
    # The actor built in trees of its own, on its node.
    work = build / "compileiq" / "work"
    assert any(p.name.startswith("ray-") for p in work.iterdir())
    assert (cxx_project / "compileiq-toolchain.cmake").is_file()


def test_an_unreachable_ray_cluster_is_a_clear_error(cxx_project, configure):
    pytest.importorskip("ray")
    configure(cxx_project, cxx_project / "build")
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(cxx_project / "build"),
                           "--ray", "127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "no Ray cluster answers at 127.0.0.1:1" in proc.stderr


def test_configurations_compiled_ahead_reach_the_strategy_as_known_code(cxx_project, configure):
    """While the worker measures, its scout tree compiles what the model names next (real g++
    builds): stored with their code (phase scout), known to the strategy before it measures
    them, never measured from that tree, and never more than compile_ahead x budget."""
    evaluator, store = cxx_evaluator(cxx_project, configure, [1], scouts=1)
    strategy = ModelGuided()
    proposals = Proposals(strategy, SPACE, lambda: history(evaluator), budget=3,
                          compile_ahead=2)
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap=True)
    ahead = store.evaluations("saxpy", phase=SCOUT)
    assert 1 <= len(ahead) <= 6 and len(proposals.ahead) == len(ahead)
    assert all(r.status == COMPILED and r.digest and not store.samples(r.id) for r in ahead)
    keys = [r.config_key for r in ahead]
    assert len(set(keys)) == len(keys)  # each named once (what it names: the test below)
    _, known = history(evaluator)
    assert {r.config_key for r in ahead} <= {config_key(SPACE.full_config(c.config)) for c in known}
    # A configuration compiled ahead and measured later has one code in both trees.
    measured = {r.config_key: r.digest for r in store.evaluations("saxpy", phase="search") if r.digest}
    assert all(measured[r.config_key] == r.digest for r in ahead if r.config_key in measured)
    store.close()


def test_several_trees_compile_ahead_at_once_each_configuration_once(cxx_project, configure):
    """Two scout trees (real g++ builds) compile at once from the start: each configuration the
    model names is taken by one tree, and both trees build."""
    evaluator, store = cxx_evaluator(cxx_project, configure, [1], scouts=2)
    proposals = Proposals(ModelGuided(), SPACE, lambda: history(evaluator), budget=3, compile_ahead=2)
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap=True)
    keys = [r.config_key for r in store.evaluations("saxpy", phase=SCOUT)]
    assert 2 <= len(keys) <= 6 and len(set(keys)) == len(keys) == len(proposals.ahead)
    assert not proposals.scouting  # no reservation outlives its compile
    work = cxx_project / "build" / "compileiq" / "work"
    for tree in ("scout", "scout-1"):
        assert (work / tree / "CMakeFiles" / "saxpy.dir" / "saxpy.cpp.o").is_file(), tree
    store.close()


def test_a_configuration_named_to_compile_ahead_is_reserved_until_compiled():
    """Trees compiling ahead at once each get a configuration no other has; `compile_ahead` per
    evaluation started bounds those compiled and compiling, in tune's loop as in `drive`."""
    proposals = Proposals(ModelGuided(), SPACE, lambda: ([], []), budget=3, compile_ahead=2)
    first, second = proposals.next_ahead(), proposals.next_ahead()
    assert first is not None and second is not None and config_key(first) != config_key(second)
    assert proposals.next_ahead() is None  # two per evaluation started, none started yet
    proposals.drop_ahead(second)  # a tree that failed gives its configuration back
    assert proposals.next_ahead() == second
    proposals.compiled_ahead(first, "code-1")
    assert proposals.next_ahead() is None and proposals.scouting == {config_key(second)}


def test_trees_compiling_ahead_share_one_candidate_trees_cores():
    """Four trees on the GPU machine (16 cores, 4 candidate trees of 4 jobs): one job each, so a
    target of many sources loads the cores no more than one tree did; one tree keeps its jobs."""
    assert scout_jobs(4, 4) == 1 and scout_jobs(8, 2) == 4 and scout_jobs(3, 4) == 1
    assert scout_jobs(None, 1) is None and scout_jobs(4, 1) == 4


def test_the_model_names_the_screening_moves_to_come_then_its_best_bounds():
    strategy = ModelGuided()
    moves = screening_moves(SPACE, {})
    assert strategy.scout(Context(SPACE, budget=10), 2) == moves[:2]
    # A move whose code is known is not named again; one measured is not either.
    known = [Candidate(moves[0], "code-a")]
    history = [Trial(moves[1], 0.5, True, code="code-b")]
    assert strategy.scout(Context(SPACE, history, known, budget=10), 1) == [moves[2]]
    # Screening over (half the budget spent): the untried configurations of unknown code.
    spent = [Trial(m, 0.9, True, code=f"c{i}") for i, m in enumerate(moves)]
    named = strategy.scout(Context(SPACE, spent, budget=4), 3)
    tried = {config_key(SPACE.full_config(m)) for m in moves}
    assert named and all(config_key(SPACE.full_config(c)) not in tried for c in named)
    assert strategy.scout(Context(SPACE, spent, closed=True, budget=4), 3) == []


class _Choosy:
    """Every configuration in turn, turning down those at -O1 once compiled (its `vet`), and not
    proposing again one it turned down (a compiled configuration is a known candidate)."""

    name = "choosy"

    def propose(self, context: Context) -> Proposal | Stop:
        known = set(context.codes)
        dims = context.space.dimensions
        for values in itertools.product(*((DEFAULT, *d.values) for d in dims)):
            config = dict(zip((d.key for d in dims), values, strict=True))
            if context.fresh(config) and not (config["CXX:O"] == "1" and config_key(config) in known):
                return Proposal(config, "choosy")
        return Stop("every configuration was proposed")

    @staticmethod
    def vet(context: Context, proposal: Proposal, candidate: Candidate) -> str:
        assert candidate.code and config_key(context.space.full_config(candidate.config)) in context.codes
        return "a test turns -O1 down" if candidate.config["CXX:O"] == "1" else ""


def test_a_proposal_its_strategy_turns_down_once_compiled_is_stored_and_not_measured(cxx_project, configure):
    """Real g++ builds: a compiled proposal that `vet` turns down is stored with its code
    (phase scout, the reason with it), runs no benchmark, and counts against the candidate bound:
    of the 7 candidates, in order, the bound of 6 leaves the last (-O3 -funroll-loops) out."""
    evaluator, store = cxx_evaluator(cxx_project, configure, [1])
    proposals = Proposals(_Choosy(), SPACE, lambda: history(evaluator), budget=100,
                          max_candidates=6)
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap=True)
    searched = store.evaluations("saxpy", phase="search")
    down = store.evaluations("saxpy", phase=SCOUT)
    assert len(down) == proposals.turned_down == 2  # -O1, with and without -funroll-loops
    assert all(r.config["CXX:O"] == "1" and r.status == COMPILED and r.digest
               and r.reason == "a test turns -O1 down" and not store.samples(r.id) for r in down)
    assert len(searched) == 4 and all(r.config["CXX:O"] != "1" for r in searched)
    assert proposals.finished == "6 candidates compiled"
    _, known = history(evaluator)
    assert {r.config_key for r in down} <= {config_key(SPACE.full_config(c.config)) for c in known}
    store.close()


class _Refining(Exhaustive):
    """Every configuration in turn, each naming the one proposed before it as its parent."""

    def propose(self, context: Context) -> Proposal | Stop:
        result = super().propose(context)
        if isinstance(result, Stop) or not context.history:
            return result
        return replace(result, parent=config_key(context.space.full_config(context.history[-1].config)))


def test_the_configuration_a_proposal_refines_is_stored_and_read_back(cxx_project, configure):
    """Real g++ builds, compiling ahead: each proposal's parent is stored with its evaluation and
    reaches the strategy with the trial, in flight (the model's local step tells which best it
    refined) and once measured."""
    evaluator, store = cxx_evaluator(cxx_project, configure, [2])  # 2 slots: one compiles, one is measured
    seen: list[tuple[str, str]] = []  # (key, parent) of every trial in flight the strategy saw
    strategy = _Refining()
    propose = strategy.propose

    def watched(context: Context) -> Proposal | Stop:
        seen.extend((config_key(SPACE.full_config(t.config)), t.parent) for t in context.history if t.pending)
        return propose(context)

    strategy.propose = watched
    proposals = Proposals(strategy, SPACE, lambda: history(evaluator), budget=100)
    run_search(evaluator, evaluator.workers, proposals, Reporter(quiet=True), overlap=True)
    rows = store.evaluations("saxpy", phase="search")
    assert len(rows) == SPACE.size - 1
    assert rows[0].parent == "" and [r.parent for r in rows[1:]] == [r.config_key for r in rows[:-1]]
    trials, _ = history(evaluator)
    assert [t.parent for t in trials] == [r.parent for r in rows]
    parents = dict(zip((r.config_key for r in rows), (r.parent for r in rows), strict=True))
    assert any(p for _, p in seen) and all(parents[k] == p for k, p in seen)
    store.close()
