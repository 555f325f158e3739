"""Child processes (builds, benchmarks) in their own process group.

A terminal's Ctrl-C then reaches only the driver, which stops between
evaluations instead of having a benchmark die mid-run and be recorded as a
failure; and a timeout kills the whole group (ninja's compilers, a benchmark's
own children), not just the direct child.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path


def run(cmd: Sequence[str], timeout: float, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Like subprocess.run(capture_output=True, text=True); raises TimeoutExpired after killing."""
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # a timeout, or the driver itself interrupted or killed
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM first: ninja then stops the compilers it runs in process groups of their
    own; SIGKILL for whatever is still there after a grace period."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.communicate(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
