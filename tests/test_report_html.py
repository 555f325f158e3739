"""`report` and `report --html` on real tuning results, the HTML rendered in headless Chromium."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, stored_evaluation
from rich.console import Console

from compileiq_build.decide.selection import SAME_AS_BASELINE, outcomes
from compileiq_build.results.effects import SAME_AS_BASELINE_CODE
from compileiq_build.results.html import render_html
from compileiq_build.results.progress import Reporter
from compileiq_build.results.report import report
from compileiq_build.store.database import MEASURED, Store
from compileiq_build.store.records import Sample

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=5000"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, configure) -> Path:
    """Every combination of -O and -funroll-loops of the fixture's -O0 library: -O2 and -O3 alone
    are far faster, and -funroll-loops alone compiles to the baseline's machine code at -O0."""
    project = tmp_path_factory.mktemp("report") / "cxx_project"
    shutil.copytree(FIXTURES / "cxx_project", project)
    build = project / "build"
    configure(project, build)
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build),
                           "--strategy", "exhaustive", "--dimensions", "O", "unroll-loops",
                           "--repeats", "3", "--max-repeats", "5"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return build


def _html(build: Path, out: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build), "--html", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out.read_text()


def _winner_options(text: str) -> list[str]:
    (key,) = re.findall(r"^  winner: (.+)$", text, re.M)
    return key.split()


def test_text_report_shows_measured_effects(tuned):
    text = report(tuned)
    assert "  Measured effects of single options (each alone against the baseline):" in text
    assert f"    CXX:unroll-loops=on (-funroll-loops): {SAME_AS_BASELINE_CODE}" in text
    for level in ("2", "3"):
        assert re.search(rf"^    CXX:O={level} \(-O{level}\): \d+\.\d+x \[\d+\.\d+x, \d+\.\d+x\], \d+ pairs: "
                         "faster$", text, re.M), text
    assert "  Removing each option of the winner" in text
    options = _winner_options(text)
    for option in options:
        assert re.search(rf"^    without {re.escape(option)} \(.+\): .+$", text, re.M), text
    if "CXX:unroll-loops=on" in options:
        # What is left is a measured -O level alone.
        assert re.search(r"^    without CXX:unroll-loops=on .*\d+ pairs: ", text, re.M), text
    else:
        assert "leaves the baseline: the winner's whole gain is lost without it" in text


def test_html_report_is_self_contained_and_complete(tuned, tmp_path):
    text = _html(tuned, tmp_path / "report.html")
    assert "<h2>saxpy" in text and "Winner:" in text
    assert "<h1>Tuning report: cxx_fixture</h1>" in text  # the project's name, not the build folder's
    for heading in ("Speedup per workload", "Best speedup so far", "How the candidates fared",
                    "Measured effects of single options", "Removing each option of the winner",
                    "Measured candidates", "Machine"):
        assert heading in text
    assert "LightGBM" not in text
    assert not re.search(r"""(src|href)=["']?https?:""", text)  # nothing fetched from elsewhere
    assert "GNU" in text  # the compiler of the tuning session
    effects = text[text.index('<table class="effects">'):]
    effects = effects[:effects.index("</table>")]
    assert re.search(r"<code>CXX:O=3</code>.*?\d+\.\d{3}x \[\d+\.\d{3}x, \d+\.\d{3}x\], \d+ pairs</td>\s*"
                     r"<td>faster", effects, re.S), effects
    assert re.search(rf"<code>CXX:unroll-loops=on</code>.*?{SAME_AS_BASELINE_CODE}", effects, re.S)
    removal = text[text.index('<table class="removals">'):]
    assert removal.count("<tr><td><code>CXX:") == len(_winner_options(report(tuned)))
    candidates = text[text.index('<table class="candidates sortable">'):]
    candidates = candidates[:candidates.index("</table>")]
    assert candidates.count("<tr><td data-sort=") == 5  # 2 x 3 configurations but the baseline
    xticks = re.findall(r'class="xtick"[^>]*>(\d+)<', text)
    assert xticks and xticks[0] == "1" and xticks[-1] == "4"  # evaluations: the baseline's code spent none
    assert re.findall(r'class="ytick"[^>]*>\d+\.\d+x<', text)


# Clicks the candidates table's speedup header once the report has loaded, and records the order.
_CLICK = """<script>window.addEventListener("load", () => {
  const t = document.querySelector("table.candidates");
  t.querySelectorAll("thead th")[3].click();
  const speedups = [...t.tBodies[0].rows].map(r => r.cells[3].dataset.sort);
  document.body.setAttribute("data-sorted", speedups.join(" "));
});</script></body>"""


def _bar(png: Path, color: str) -> tuple[int, int]:
    """The most pixels of exactly this colour in one row of the picture, and how many rows hold as many."""
    from PIL import Image

    rgb = tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))
    per_row = (np.asarray(Image.open(png).convert("RGB")) == rgb).all(axis=2).sum(axis=1)
    return int(per_row.max()), int((per_row == per_row.max()).sum())


@pytest.mark.skipif(not CHROMIUM, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_html_report_renders_its_charts_in_chromium(tuned, tmp_path):
    out = tmp_path / "report.html"
    text = _html(tuned, out)
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          out.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert 'data-ready="1"' in dom, dom[-2000:]
    drawn = [int(n) for n in re.findall(r'class="chart"[^>]*data-drawn="(\d+)"', dom)]
    assert len(drawn) >= 3  # speedup, convergence, verdicts
    assert all(n > 0 for n in drawn), drawn  # every chart laid out marks with a size
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1200,1600",
                    f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120)
    # The picture shows the data: the verdict bars painted in their colours, as long as the counts
    # say (4 faster, 1 neutral: -funroll-loops alone is the baseline's code), and as tall.
    (faster, high), (neutral, neutral_high) = _bar(shot, "#2f855a"), _bar(shot, "#a0aec0")
    assert faster >= 200 and abs(faster - 4 * neutral) <= 2 and high == neutral_high >= 10, \
        (faster, high, neutral, neutral_high)

    clicked = tmp_path / "clicked.html"
    clicked.write_text(text.replace("</body>", _CLICK))
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile3'}", "--dump-dom",
                          clicked.as_uri()], capture_output=True, text=True, timeout=120).stdout
    (order,) = re.findall(r'data-sorted="([^"]*)"', dom)
    speedups = [float(v) for v in order.split()]
    assert len(speedups) == 5 and speedups == sorted(speedups), order  # ascending after one click
    assert 'data-order="ascending"' in dom


def test_html_report_says_what_ships(tuned, tmp_path):
    text = _html(tuned, tmp_path / "report.html")
    source = tuned.parent
    assert f"Toolchain file: <code>{source / 'compileiq-toolchain.cmake'}</code>." in text
    ships = text[text.index('<table class="ships">'):]
    ships = ships[:ships.index("</table>")]
    (flags,) = re.findall(r"^  flags:  (.+)$", report(tuned), re.M)
    assert "<th>CXX: the project's flags</th><td><code>-O0</code></td>" in ships  # the fixture's own
    assert f"<th>CXX: shipped, added after them</th><td><code>{flags}</code></td>" in ships
    times = text[text.index('<table class="times">'):]
    assert re.search(r"<td>saxpy\[200000 30\]</td><td>\d+\.?\d* ms \(spread \d+\.\d+%, n=\d+\)</td>"
                     r"<td>\d+\.?\d* ms \(spread", times), times[:600]
    # The search's best stands above the shipped re-measurement, and the page says why.
    best = max(float(v) for v in re.findall(r'<td data-sort="(\d+\.\d+)">', text))
    (shipped,) = re.findall(r"Winner: (\d+\.\d+)x", text)
    if best > float(shipped):
        assert f"The search's best measurement, {best:.3f}x" in text and "(selection bias)" in text
    # Candidates reusing another's code are not counted as findings again; numbered as the log counts.
    assert "5 candidates measured (4 distinct machine codes)" in text  # -funroll-loops alone: the baseline's
    numbers = re.findall(r'<tr><td data-sort="\d+">(\d*)</td>', text)
    assert sorted(numbers) == ["", "1", "2", "3", "4"] and [n for n in numbers if n] == ["1", "2", "3", "4"]
    assert re.search(r"Noise: the baseline's runs spread by a median \d+\.\d+%", text)
    # The load seen while measuring, either way (this machine's other work may well show).
    assert ("no other process was seen using the GPU or the CPU while measuring" in text) != \
        ("<tr><th>CPU load</th>" in text)


# Records whether the page is wider than the window, and where the "What ships" table lies.
_LAPTOP = """<script>window.addEventListener("load", () => {
  const ships = document.querySelector("table.ships").getBoundingClientRect();
  const overflow = document.documentElement.scrollWidth - window.innerWidth;
  document.body.setAttribute("data-overflow", String(overflow));
  document.body.setAttribute("data-ships", `${Math.round(ships.width)} ${Math.round(ships.right)}`);
});</script></body>"""


@pytest.mark.skipif(not CHROMIUM, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_html_report_fits_a_laptop_screen(tuned, tmp_path):
    page = tmp_path / "laptop.html"
    page.write_text(_html(tuned, tmp_path / "report.html").replace("</body>", _LAPTOP))
    laptop = "--window-size=1280,800"
    dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", laptop, "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    (overflow,) = re.findall(r'data-overflow="(-?\d+)"', dom)
    width, right = map(int, re.findall(r'data-ships="(\d+) (\d+)"', dom)[0])
    assert int(overflow) <= 0, overflow  # no sideways scrolling at 1280 pixels
    assert width > 0 and right <= 1280
    shot = tmp_path / "laptop.png"
    # At a laptop's width, a window tall enough for the whole page: the verdict bars stand below
    # the first 800 pixels since the page says what ships first.
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1280,4000",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120)
    faster, _ = _bar(shot, "#2f855a")  # the verdict bars drawn at that width
    assert shot.is_file() and faster > 0


def test_html_numbers_the_candidates_as_the_log_does(tmp_path):
    """The candidates table's numbers are the progress counter's: candidates of a code measured
    before (or of the baseline's) spend no evaluation, and a second worker's evaluation is
    numbered when it finished, not when it started."""
    store = Store(tmp_path / "r.sqlite")
    session = store.start_session("test", {})
    arch = {"CXX": "x86_64"}
    # 'slow' starts first, on another worker, and finishes last.
    slow = store.begin_evaluation(session, "saxpy", arch, "slow", {"CXX:x": "slow"}, {"CXX": ["-fslow"]},
                                  "staged", "search")
    for key, ratio in (("a", 0.8), ("twin", 0.8), ("base", 1.0), ("b", 0.9)):
        stored_evaluation(store, session, key, "search", ratio, arch)
    for rep in range(10):
        store.add_sample(slow, "candidate", rep, Sample("w", 0.95, 0.95, 0.1, 0, ""))
        store.add_sample(slow, "baseline", rep, Sample("w", 1.0, 1.0, 0.1, 0, ""))
    store.finish_evaluation(slow, MEASURED)
    ids = {r.config_key: r.id for r in store.evaluations("saxpy", arch, "search")}
    store.set_code(ids["a"], "code-a", {}, None)
    store.set_code(ids["twin"], "code-a", {}, ids["a"])
    store.set_code(ids["base"], "code-base", {}, SAME_AS_BASELINE)
    # The log, as tune prints it: each outcome as it finished.
    log = io.StringIO()
    reporter = Reporter(Console(file=log, highlight=False))
    reporter.start(["saxpy"], 10)
    found = {o.evaluation.config_key: o for o in outcomes(store, "saxpy", arch, "search")}
    for key in ("a", "twin", "base", "b", "slow"):
        reporter.outcome("saxpy", found[key])
    # The log's number of a candidate: the counter, where it went up; a reused code names its twin's.
    logged, counter = {}, 0
    for line in log.getvalue().splitlines():
        done, twin, key = re.match(r"\[saxpy (\d+)/10, .*?\] (?:\(machine code of evaluation (\d+)\) )?"
                                   r"(\w+):", line).groups()
        logged[key] = done if int(done) > counter else f"#{twin}" if twin else ""
        counter = int(done)
    page = render_html(store, "t")
    store.close()
    shown = {}
    rows = re.findall(r'<tr><td data-sort="\d+">(\d*)</td><td><code>-f(\w+)</code>(.*?)</tr>', page, re.S)
    for number, key, rest in rows:
        twin = re.search(r"same machine code as (#\d+)", rest)
        shown[key] = twin.group(1) if twin else number
    assert logged == {"a": "1", "twin": "#1", "base": "", "b": "2", "slow": "3"}, log.getvalue()
    assert shown == logged
    assert "staged (3)" in page  # the curve counts evaluations too
