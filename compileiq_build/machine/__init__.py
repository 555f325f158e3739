"""The machine: its GPUs and tools (environment), NVML during runs (gpu), child processes in their own
group (process).
"""
