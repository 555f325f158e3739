"""Choosing what to measure: the search loop (loop), one target's search (target), its history from the
store (history), the prior learned across kernels (prior, learn) and the strategies (strategies/).
"""
