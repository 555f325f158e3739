"""benchmarks/proposal_trace.py: the text that shows a refactoring left the search as it was."""

from __future__ import annotations

from benchmarks.proposal_trace import trace


def test_the_trace_is_the_same_twice_and_names_each_proposal_and_its_phase():
    first = trace(tables=1, budget=3, seeds=1)
    assert first == trace(tables=1, budget=3, seeds=1)
    headers = [line for line in first if " seed 0 ahead " in line]
    assert len(headers) == 6  # model, staged, random; closed and compiling ahead
    assert any(line.endswith(" screen") for line in first) and any(line.endswith(" staged") for line in first)
