"""What an evaluation costs, and how throughput grows with GPUs (issue 6).

Tunes one sample_project target with the same exhaustive sequence of candidates once
per GPU setup (`--setups 0 0,1`: GPU 0 alone, then GPUs 0 and 1), each in a build folder
of its own, and reads the store:

- overhead ratio = wall time of the search / the work it cannot avoid, summed over the
  search's evaluations: the candidate's build (Ninja: the changed objects and the link)
  plus every benchmark process it ran (candidate and paired baseline runs).  Below 1
  means compiles overlapped with measurement; the rest is the tool's own time.
- evaluations per hour of the search, dedup hits (candidates whose machine code was
  measured before), and the speed-up of each setup over the first.

    python -m benchmarks.evaluation_throughput --workdir /tmp/tp --setups 0 0,1 \\
        --target stencil_kernels --budget 48 --out results.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from compileiq_build import cmake_dir

ROOT = Path(__file__).resolve().parent.parent
DIMENSIONS = ["ptxas-O", "register-usage-level", "dlcm", "dscm"]


def configure(build: Path, stencil_reps: int) -> None:
    subprocess.run(["cmake", "-S", str(ROOT / "sample_project"), "-B", str(build), "-G", "Ninja",
                    f"-DCompileIQ_ROOT={cmake_dir()}", "-DCMAKE_CUDA_ARCHITECTURES=90",
                    f"-DSAMPLE_STENCIL_REPS={stencil_reps}"], check=True, capture_output=True)


def tune(build: Path, gpus: str, args: argparse.Namespace) -> float:
    cmd = [sys.executable, "-m", "compileiq_build", "tune", str(build), "--targets", args.target,
           "--strategy", "exhaustive", "--dimensions", *args.dimensions, "--budget", str(args.budget),
           "--repeats", str(args.repeats), "--max-repeats", str(args.repeats), "--gpus", gpus,
           "--fresh", "--yes"]
    if args.jobs:
        cmd += ["--jobs", str(args.jobs)]
    start = time.monotonic()
    with (build / "tune.log").open("w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"tune failed ({proc.returncode}); see {build / 'tune.log'}")
    return time.monotonic() - start


def metrics(build: Path, target: str) -> dict[str, float | int]:
    db = sqlite3.connect(build / "compileiq" / "results.sqlite")
    rows = db.execute(
        "SELECT e.id, e.started, e.finished, e.build_seconds, e.same_as IS NOT NULL, e.worker,"
        " COALESCE((SELECT SUM(s.wall_s) FROM samples s WHERE s.evaluation_id = e.id), 0)"
        " FROM evaluations e WHERE e.phase = 'search' AND e.target = ?",
        (target,)).fetchall()
    window = max(r[2] for r in rows) - min(r[1] for r in rows)
    build_s = sum(r[3] or 0.0 for r in rows)
    bench_s = sum(r[6] for r in rows)
    return {"evaluations": len(rows), "dedup_hits": sum(1 for r in rows if r[4]),
            "workers": len({r[5] for r in rows}), "search_wall_s": round(window, 1),
            "build_s": round(build_s, 1), "benchmark_s": round(bench_s, 1),
            "overhead_ratio": round(window / (build_s + bench_s), 3),
            "evaluations_per_hour": round(3600 * len(rows) / window, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.evaluation_throughput", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--setups", nargs="+", default=["0"], metavar="GPUS",
                   help="GPU lists as tune --gpus takes them, one run each")
    p.add_argument("--target", default="stencil_kernels")
    p.add_argument("--dimensions", nargs="+", default=DIMENSIONS)
    p.add_argument("--budget", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--jobs", type=int)
    p.add_argument("--reps-stencil", type=int, default=50,
                   help="kernel launches per stencil run (sample_project's SAMPLE_STENCIL_REPS)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    results = {}
    for gpus in args.setups:
        build = args.workdir / f"gpus-{gpus.replace(',', '-')}"
        shutil.rmtree(build / "compileiq" / "work", ignore_errors=True)
        configure(build, args.reps_stencil)
        wall = tune(build, gpus, args)
        results[gpus] = {**metrics(build, args.target), "tune_wall_s": round(wall, 1)}
        print(f"GPUs {gpus}: {json.dumps(results[gpus])}", flush=True)
    first = results[args.setups[0]]["evaluations_per_hour"]
    for r in results.values():
        r["speedup_vs_first"] = round(r["evaluations_per_hour"] / first, 3)
    if args.out:
        args.out.write_text(json.dumps({"target": args.target, "dimensions": args.dimensions,
                                        "stencil_reps": args.reps_stencil,
                                        "budget": args.budget, "repeats": args.repeats,
                                        "setups": results}, indent=2) + "\n")
    print(f"{'GPUs':8} {'evals':>6} {'dedup':>6} {'search s':>9} {'build s':>8} {'bench s':>8} "
          f"{'overhead':>9} {'evals/h':>8} {'speed-up':>9}")
    for gpus, r in results.items():
        print(f"{gpus:8} {r['evaluations']:>6} {r['dedup_hits']:>6} {r['search_wall_s']:>9} "
              f"{r['build_s']:>8} "
              f"{r['benchmark_s']:>8} {r['overhead_ratio']:>9} {r['evaluations_per_hour']:>8} "
              f"{r['speedup_vs_first']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
