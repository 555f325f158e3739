"""What the user reads and commits: the live panel and log (progress), reports (report, html, effects)
and the toolchain file (toolchain).
"""
