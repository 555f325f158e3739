"""One candidate measured against the baseline: the baseline itself (baseline), building and recording
a candidate (evaluator), its paired runs (pairing).
"""
