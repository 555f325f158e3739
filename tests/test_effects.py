"""Measured effects of single options (effects.py) and their place in the HTML report, on a store
filled through the Store API the way the evaluator fills it: paired candidate and baseline samples,
and a code digest per candidate (`same_as` for machine code measured before)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from compileiq_build.decide.selection import SAME_AS_BASELINE, Winner, decide, outcomes
from compileiq_build.results import effects
from compileiq_build.results.effects import one_option_moves, removals
from compileiq_build.results.html import render_html
from compileiq_build.store.database import MEASURED, Store
from compileiq_build.store.records import Sample

ARCH = {"CUDA": "sm_90"}
WORKLOAD = "sgemm[--n 4096]"
FLAGS = {"CUDA:maxrregcount": "--maxrregcount=128", "CUDA:restrict": "--restrict",
         "CUDA:extra-device-vectorization": "--extra-device-vectorization",
         "CUDA:dlcm": "--ptxas-options=-dlcm=cg"}
VALUES = {"CUDA:maxrregcount": "128", "CUDA:restrict": "on", "CUDA:extra-device-vectorization": "on",
          "CUDA:dlcm": "cg"}


class Recorder:
    """Evaluations of one SGEMM target as the evaluator records them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.session = store.start_session("tune build", {"compilers": {"CUDA": "nvcc 13.0"}})
        self.rng = np.random.default_rng(7)

    def add(self, options: list[str], phase: str, ratio: float | None, digest: str,
            same_as: int | None = None, pairs: int = 10) -> int:
        config = {k: VALUES[k] for k in options}
        key = " ".join(sorted(f"{k}={v}" for k, v in config.items()))
        flags = {"CUDA": tuple(FLAGS[k] for k in sorted(options))}
        evaluation = self.store.begin_evaluation(self.session, "sgemm", ARCH, key, config, flags,
                                                 "model", phase, worker="gpu0")
        self.store.set_code(evaluation, digest, {"registers": 128.0}, same_as)
        if same_as is None and ratio is not None:
            for rep in range(pairs):
                base = 1.2e-3 * (1 + self.rng.normal(0, 0.004))
                cand = 1.2e-3 * ratio * (1 + self.rng.normal(0, 0.004))
                for role, cost in (("baseline", base), ("candidate", cand)):
                    self.store.add_sample(evaluation, role, rep, Sample(WORKLOAD, cost, cost, 0.05, 0, ""))
        self.store.finish_evaluation(evaluation, MEASURED, "", 4.2)
        return evaluation


@pytest.fixture
def store(tmp_path):
    """restrict alone compiles to the baseline's code; maxrregcount alone is 10% faster; dlcm alone
    is noise; extra-device-vectorization is never measured alone.  The winner (maxrregcount,
    extra-device-vectorization, restrict) has the code of maxrregcount + extra-device-vectorization."""
    s = Store(tmp_path / "results.sqlite")
    r = Recorder(s)
    r.add(["CUDA:restrict"], "search", None, "d-base", same_as=SAME_AS_BASELINE)
    reg = r.add(["CUDA:maxrregcount"], "search", 0.90, "d-reg")
    r.add(["CUDA:dlcm"], "search", 1.0, "d-dlcm")
    pair = r.add(["CUDA:maxrregcount", "CUDA:extra-device-vectorization"], "search", 0.88, "d-pair")
    r.add(["CUDA:maxrregcount", "CUDA:restrict"], "search", None, "d-reg", same_as=reg)
    trio = ["CUDA:maxrregcount", "CUDA:extra-device-vectorization", "CUDA:restrict"]
    r.add(trio, "search", None, "d-pair", same_as=pair)
    r.add(trio, "validate", 0.88, "d-pair", pairs=12)
    yield s
    s.close()


def _measured(store):
    return outcomes(store, "sgemm", ARCH, "search") + outcomes(store, "sgemm", ARCH, "validate")


def test_one_option_moves_say_what_each_option_did_alone(store):
    moves = {m.option: m for m in one_option_moves(_measured(store))}
    reg = moves["CUDA:maxrregcount=128"]
    assert reg.finding == "faster" and reg.flag == "--maxrregcount=128"
    (e,) = reg.estimates.values()
    assert e.pairs == 10 and e.high < 1.0 and 0.88 < e.ratio < 0.92
    assert moves["CUDA:restrict=on"].finding == effects.SAME_AS_BASELINE_CODE
    assert moves["CUDA:restrict=on"].estimates == {}  # not run: no interval to show
    assert moves["CUDA:dlcm=cg"].finding == effects.NOISE
    edv = moves["CUDA:extra-device-vectorization=on"]
    assert edv.finding == effects.NOT_ALONE and edv.outcome is None and edv.measured_with == 2
    # Measured moves first, fastest first; then what was never measured alone.
    order = list(moves)
    assert order[0] == "CUDA:maxrregcount=128" and order[-1] == "CUDA:extra-device-vectorization=on"


def test_removing_each_option_of_the_winner(store):
    winner = decide(store, "sgemm", ARCH)
    assert isinstance(winner, Winner)
    assert winner.config_key == ("CUDA:extra-device-vectorization=on CUDA:maxrregcount=128 "
                                 "CUDA:restrict=on")
    found = {r.option: r for r in removals(winner, _measured(store))}
    assert set(found) == {"CUDA:extra-device-vectorization=on", "CUDA:maxrregcount=128", "CUDA:restrict=on"}
    assert found["CUDA:restrict=on"].finding.startswith(effects.SAME_AS_WINNER_CODE)
    # Without extra-device-vectorization: the code of maxrregcount alone, 0.90 against the winner's 0.88.
    edv = found["CUDA:extra-device-vectorization=on"]
    assert edv.remaining == "CUDA:maxrregcount=128 CUDA:restrict=on"
    assert edv.finding == "slower without it" and edv.estimates
    assert found["CUDA:maxrregcount=128"].finding == effects.NOT_MEASURED


def test_html_report_shows_effects_candidates_and_axes(store):
    text = render_html(store, "Tuning report: sgemm_demo")
    assert "<title>Tuning report: sgemm_demo" in text and "<h1>Tuning report: sgemm_demo</h1>" in text
    assert "Which options mattered" not in text and "LightGBM" not in text
    table = text[text.index('<table class="effects">'):]
    table = table[:table.index("</table>")]
    row = re.search(r"<tr><td><code>CUDA:maxrregcount=128</code>.*?</tr>", table, re.S)
    assert row and re.search(r"1\.1\d\dx \[1\.1\d\dx, 1\.1\d\dx\], 10 pairs", row.group()), row
    assert all(finding in table for finding in (effects.SAME_AS_BASELINE_CODE, effects.NOT_ALONE,
                                                effects.NOISE))
    removal = text[text.index('<table class="removals">'):]
    removal = removal[:removal.index("</table>")]
    assert all(finding in removal for finding in (effects.SAME_AS_WINNER_CODE, "slower without it",
                                                  effects.NOT_MEASURED))
    candidates = text[text.index('<table class="candidates sortable">'):]
    candidates = candidates[:candidates.index("</table>")]
    assert candidates.count("<tr><td data-sort=") == 6  # one row per searched candidate
    assert "d-reg" in candidates and "same machine code as the baseline: not run" in candidates
    assert re.search(r'class="xtick"[^>]*>1<', text)  # the convergence chart's evaluation numbers
    assert re.search(r'class="ytick"[^>]*>1\.\d+x<', text)
