"""Running what was built: one benchmark run and its numbers (measure, parsers), Nsight Compute's
kernel times (profiler), the workers that build and run (worker, ray_worker) and their start
(launch).
"""
