"""What a GPU sitting's scripts share: the work runs in the background, in a session of its own
(a device call ends, the machine stays warm a little while, the next call follows it), every
command's output goes to a log, and the GPU's state is recorded before and after.

Used by the LLM campaign (`benchmarks/llm/campaign.py`) and the live panel
(`benchmarks/live/sitting.py`).
"""

from __future__ import annotations

import datetime
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from compileiq_build.errors import CompileIQError
from compileiq_build.machine import process

GPU_QUERY = ("timestamp,name,driver_version,clocks.current.sm,clocks.current.memory,clocks.max.sm,"
             "temperature.gpu,power.draw,clocks_event_reasons.active,compute_mode,persistence_mode")


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def stamp(text: str) -> str:
    return f"[{datetime.datetime.now().strftime('%H:%M:%S')}] {text}"


def run_logged(cmd: Sequence[str], timeout: float, log: Path, env: Mapping[str, str] | None = None,
               cwd: Path | None = None, echo: bool = True) -> tuple[int, str]:
    """Run a command, its output and errors appended to `log` (and the terminal, with `echo`)
    as they come; returns its exit code (-1: stopped at the timeout, with its children) and its
    output."""
    if not shutil.which(cmd[0]):
        raise CompileIQError(f"{cmd[0]} is not on PATH: this step needs it (on the GPU machine: "
                             "CUDA's bin folder, cmake, ninja, nvidia-smi)")
    lines: list[str] = []
    with log.open("a") as f:
        def line(text: str) -> None:
            lines.append(text)
            f.write(text)
            if echo:
                sys.stdout.write(text)

        try:
            rc = process.run(cmd, timeout, cwd, dict(env) if env is not None else None, on_line=line,
                             merge_stderr=True).returncode
        except subprocess.TimeoutExpired:
            f.write(stamp(f"stopped after {timeout:.0f} s") + "\n")
            rc = -1
    return rc, "".join(lines)


def start_background(cmd: Sequence[str], out: Path) -> int:
    """`cmd` in a session of its own (as setsid), its output in out/job.out, its pid in
    out/job.pid: it outlives the command that started it."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "job.out").open("w") as log:
        proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    (out / "job.pid").write_text(f"{proc.pid}\n")
    return proc.pid


def wait_background(out: Path, timeout: float, what: str) -> bool:
    """Wait up to `timeout` s for the job `start_background` left in `out`; print its output's
    last lines and whether it still runs (returned)."""
    pid_file = out / "job.pid"
    if not pid_file.is_file():
        raise CompileIQError(f"no {what} was started here ({pid_file} is missing)")
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        time.sleep(5)
    running = alive(pid)
    print("\n".join((out / "job.out").read_text(errors="replace").splitlines()[-40:]))
    print(f"{what} {'still running' if running else 'ended'}")
    return running


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A finished child of nobody stays a zombie until reaped: count it as ended.
    status = Path(f"/proc/{pid}/stat")
    return not (status.is_file() and status.read_text().split(")")[-1].split()[0] == "Z")


def copy_store(store: Path, to: Path) -> None:
    """A consistent copy of a results store that `tune` may be writing (SQLite's backup)."""
    src = sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)
    dst = sqlite3.connect(to)
    src.backup(dst)
    dst.close()
    src.close()
