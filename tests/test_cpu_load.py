"""Competing CPU load while CPU benchmarks are measured (issue 41 item 5): warned of and recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from compileiq_build.machine.cpu import CpuLoadMonitor, _own_s

BURN = "while :; do :; done"


def _outside_burner(seconds: int) -> int:
    """A busy process that is not this one's descendant (its shell exits at once): the pid of
    the `timeout` that runs it, which passes SIGTERM on to the loop (SIGKILL would orphan it)."""
    out = subprocess.run(["sh", "-c", f"timeout {seconds} sh -c '{BURN}' >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True).stdout
    return int(out)


def _ticks(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def test_own_running_children_count_as_ours():
    child = subprocess.Popen(["sh", "-c", BURN])
    try:
        time.sleep(0.5)
        ours, theirs = _own_s(), _ticks(child.pid)
        time.sleep(2.0)
        grew, burned = _own_s() - ours, _ticks(child.pid) - theirs
    finally:
        child.kill()
        child.wait()
    assert burned > 0.05 and abs(grew - burned) < 0.3, (grew, burned)


def _watched(window: float, seconds: float) -> tuple[list, CpuLoadMonitor]:
    """What a monitor of `window` saw while an outside process burned a core for `seconds`."""
    pid = _outside_burner(10)
    seen: list = []
    try:
        with CpuLoadMonitor(seen.append, window=window) as monitor:
            time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGTERM)  # timeout passes it on; SIGKILL left the loop running
    return seen, monitor


def test_another_process_using_the_cpu_is_seen():
    seen, monitor = _watched(window=1.0, seconds=3.5)
    assert seen and monitor.busy and monitor.busy[0].cores >= 0.5, monitor.busy
    # Consecutive busy windows are one episode, its average over all of them.
    assert len(monitor.busy) == 1 and monitor.busy[0].seconds >= 2.5
    assert monitor.busy[0].text().startswith(f"other processes used {monitor.busy[0].cores:.1f} of")


def test_load_in_a_run_shorter_than_one_window_is_seen_when_it_ends():
    seen, monitor = _watched(window=30.0, seconds=2.0)
    assert len(seen) == 1 and monitor.busy == seen and 1.5 < seen[0].seconds < 5, seen


def test_tune_warns_of_cpu_load_and_the_reports_say_so(cxx_project, configure, tmp_path):
    build = cxx_project / "build"
    configure(cxx_project, build)
    pid = _outside_burner(120)
    try:
        tune = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build), "--strategy",
                               "staged", "--budget", "2", "--repeats", "5", "--max-repeats", "5"],
                              capture_output=True, text=True, timeout=300)
    finally:
        os.kill(pid, signal.SIGTERM)  # timeout passes it on; SIGKILL left the loop running
    assert tune.returncode == 0, tune.stderr
    said = " ".join(tune.stderr.split())
    assert "warning: saxpy: other processes used" in said and "while its CPU benchmarks ran" in said
    text = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build), "--html",
                           str(tmp_path / "r.html")], capture_output=True, text=True, timeout=120).stdout
    assert "warning: session 1, saxpy: other processes used" in text
    page = (tmp_path / "r.html").read_text()
    assert "<tr><th>CPU load</th><td class=\"none\">session 1, saxpy: other processes used" in page
