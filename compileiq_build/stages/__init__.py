"""The tune run's stages in order: profiling, searching (search/), validation and minimizing, ordered
by tune.
"""
