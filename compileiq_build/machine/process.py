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
import threading
from collections.abc import Callable, Sequence
from pathlib import Path


def run(cmd: Sequence[str], timeout: float, cwd: Path | None = None,
        env: dict[str, str] | None = None, on_line: Callable[[str], None] | None = None,
        merge_stderr: bool = False) -> subprocess.CompletedProcess[str]:
    """Like subprocess.run(capture_output=True, text=True); raises TimeoutExpired after killing.
    `on_line` is given each line of the output as it comes (a long build's progress);
    `merge_stderr`: the error stream goes to the output, in order (a log)."""
    stderr = subprocess.STDOUT if merge_stderr else subprocess.PIPE
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=stderr,
                            text=True, errors="replace", start_new_session=True)
    try:
        if on_line is None:
            out, err = proc.communicate(timeout=timeout)
        else:
            out, err = _stream(proc, timeout, on_line)
    except BaseException:  # a timeout, or the driver itself interrupted or killed
        _kill_group(proc, drain=on_line is None)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err or "")


def _stream(proc: subprocess.Popen[str], timeout: float, on_line: Callable[[str], None]) -> tuple[str, str]:
    """The output and error of `proc`, read to their ends by threads of their own (a pipe left
    unread blocks the child), each output line handed to `on_line` as it comes."""
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None
    out: list[str] = []
    err: list[str] = []

    def lines() -> None:
        for line in stdout:
            out.append(line)
            on_line(line)

    readers = [threading.Thread(target=lines, daemon=True)]
    if stderr is not None:  # else merged into the output
        readers.append(threading.Thread(target=lambda: err.append(stderr.read()), daemon=True))
    for reader in readers:
        reader.start()
    proc.wait(timeout=timeout)
    for reader in readers:
        reader.join()
    return "".join(out), "".join(err)


def _kill_group(proc: subprocess.Popen[str], drain: bool = True) -> None:
    """SIGTERM first: ninja then stops the compilers it runs in process groups of their
    own; SIGKILL for whatever is still there after a grace period.  `drain`: read the pipes
    meanwhile (else threads of `_stream` read them)."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            if drain:
                proc.communicate(timeout=grace)
            else:
                proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
