"""`report --html` on real tuning results, rendered in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=5000"]


@pytest.fixture
def tuned(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build),
                           "--strategy", "staged", "--budget", "4",
                           "--repeats", "3", "--max-repeats", "5"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return build


def test_html_report_is_self_contained_and_complete(tuned, tmp_path):
    out = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(tuned), "--html", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "<h2>saxpy" in text and "Winner:" in text
    for heading in ("Speedup per workload", "Best speedup so far", "How the candidates fared",
                    "Which options mattered", "Machine"):
        assert heading in text
    assert not re.search(r"""(src|href)=["']?https?:""", text)  # nothing fetched from elsewhere
    assert "GNU" in text  # the compiler of the tuning session


@pytest.mark.skipif(not CHROMIUM, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_html_report_renders_its_charts_in_chromium(tuned, tmp_path):
    out = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(tuned), "--html", str(out)],
                   check=True, capture_output=True)
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          out.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert 'data-ready="1"' in dom, dom[-2000:]
    drawn = [int(n) for n in re.findall(r'class="chart"[^>]*data-drawn="(\d+)"', dom)]
    assert len(drawn) >= 4  # speedup, convergence, verdicts, importance
    assert all(n > 0 for n in drawn), drawn  # every chart laid out marks with a size
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1200,1600",
                    f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000
