"""How often the tool calls noise a gain (A/A), and how small a real gain it detects.

Runs on a GPU machine.  It builds sample_project's stencil benchmark and takes two
pools of paired runs through the tool's own runner (`measure.run_workload`, random
order within each pair, GPU state recorded):

- A/A: the same binary and arguments on both sides;
- power: `--n 512` against `--nz 517`, a grid 517/512 = 0.98% deeper (0.98% more work).

It then replays the tool's decision on windows of consecutive pairs: the search
stage (`Sampling()` defaults: 5 to 20 pairs, stop when decided or narrower than
0.5%) and, on the pairs that follow, the validation stage (twice the pairs); a
candidate wins only if both call it faster.  From the A/A pool it also finds the
smallest slowdown that the default settings detect with 95% power (the A/A
ratios scaled by a known factor).

The search stage races (`racing.raced_out`) as `tune` does, with the noise that
the store's history would give (the pool's successive differences of log ratios).
Racing is measured per kind of candidate, the A/A ratios scaled: identical, 1%
faster, 0.88x and 1.5x slower, each with no reference (fewer than 3 candidates faster
so far) and with a reference of 0.99 (3 finalists 1% faster, so a 1%-faster
candidate is only as good as them: the hardest case that must keep racing).

    python -m benchmarks.measurement_power --build /tmp/power --pairs 150 --out results/
    python -m benchmarks.measurement_power --pools results/measurement_pools.json --out results/
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import time
from dataclasses import asdict, replace
from itertools import pairwise
from pathlib import Path

from compileiq_build import cmake_dir
from compileiq_build.decide.racing import NORMAL_STEP, Race, Sampling, raced_out, sampling_done
from compileiq_build.decide.stats import ratio_estimate
from compileiq_build.machine import environment
from compileiq_build.machine.gpu import GpuMonitor, slowdowns
from compileiq_build.project.manifest import load_manifest
from compileiq_build.run.measure import run_workload

ROOT = Path(__file__).resolve().parent.parent
NZ = 517  # against n = 512: 0.98% more planes


def build(folder: Path, arch: str) -> Path:
    cmake, ninja = environment.find_tool("cmake"), environment.find_tool("ninja")
    subprocess.run([cmake, "-S", str(ROOT / "sample_project"), "-B", str(folder), "-G", "Ninja",
                    f"-DCMAKE_MAKE_PROGRAM={ninja}", f"-DCompileIQ_ROOT={cmake_dir()}",
                    f"-DCMAKE_CUDA_ARCHITECTURES={arch}"], check=True, capture_output=True)
    subprocess.run([ninja, "-C", str(folder), "bench_stencil"], check=True, capture_output=True)
    return folder


def pool(bench_a, bench_b, exe: Path, pairs: int, monitor: GpuMonitor, seed: int) -> list[dict]:
    """Paired runs: 'cand' is bench_a, 'base' is bench_b, in random order within the pair."""
    order = random.Random(seed)
    rows = []
    for i in range(pairs):
        row: dict = {"pair": i}
        for role in order.sample(("cand", "base"), 2):
            run = run_workload(bench_a if role == "cand" else bench_b, exe, timeout=120, monitor=monitor)
            if not run.ok:
                raise SystemExit(f"benchmark failed: {run.error}")
            sample = run.samples[0]
            row[role] = sample.cost
            row[f"{role}_gpu"] = sample.gpu
            row.setdefault("first", role)
        rows.append(row)
    return rows


def decide(rows: list[dict], start: int, sampling: Sampling,
           race: Race | None = None) -> tuple[bool, int, bool] | None:
    """The tool's verdict on pairs from `start` on: (faster?, pairs used, raced out?); None past
    the end."""
    cand, base = [], []
    for i in range(start, len(rows)):
        cand.append(rows[i]["cand"])
        base.append(rows[i]["base"])
        costs = {"w": (cand, base)}
        if sampling_done(costs, len(cand), sampling, 0.0, race):
            raced = bool(raced_out(costs, len(cand), race))
            return not raced and ratio_estimate(cand, base).faster, len(cand), raced
    return None


def replay(rows: list[dict], sampling: Sampling, race: Race | None = None) -> dict:
    """Search (racing against `race`) then validation on every start position that leaves room
    for both."""
    search_calls = both_calls = windows = raced = 0
    used = []
    for start in range(len(rows)):
        first = decide(rows, start, sampling, race)
        if first is None:
            break
        second = decide(rows, start + first[1], sampling.scaled(2))
        if second is None:
            break
        windows += 1
        used.append(first[1])
        search_calls += first[0]
        both_calls += first[0] and second[0]
        raced += first[2]
    return {"windows": windows, "search_faster": search_calls / max(windows, 1),
            "winner": both_calls / max(windows, 1), "raced_out": raced / max(windows, 1),
            "median_search_pairs": statistics.median(used) if used else None,
            "mean_search_pairs": round(statistics.mean(used), 2) if used else None}


def noise(rows: list[dict], sampling: Sampling) -> Race:
    """What the store's history gives the racing rule: the noise of the log paired ratio; the
    incumbent is the baseline (nothing faster found yet), as in screening."""
    logs = [math.log(r["cand"] / r["base"]) for r in rows]
    return Race(None, {"w": statistics.median(abs(a - b) for a, b in pairwise(logs)) / NORMAL_STEP},
                incumbent=1.0, precision=sampling.precision)


def scaled(rows: list[dict], factor: float) -> list[dict]:
    return [{**r, "cand": r["cand"] * factor} for r in rows]


def smallest_detected(aa: list[dict], sampling: Sampling) -> list[dict]:
    """Power of the search+validation decision when the A/A candidate is made faster by d, racing
    against finalists exactly as fast as it."""
    table = []
    for d in (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01):
        race = replace(noise(aa, sampling), reference=1 - d)
        table.append({"faster_by": d, **replay(scaled(aa, 1 - d), sampling, race)})
    return table


def racing(aa: list[dict], sampling: Sampling) -> list[dict]:
    """Per kind of candidate and reference: how often racing stops it, its calls, its pairs."""
    kinds = {"identical": 1.0, "1% faster": 0.99, "0.88x (13.6% slower)": 1 / 0.88, "1.5x slower": 1.5}
    table = []
    for kind, factor in kinds.items():
        for reference in (None, 0.99):
            rows, race = scaled(aa, factor), replace(noise(aa, sampling), reference=reference,
                                                     incumbent=reference or 1.0)
            table.append({"kind": kind, "reference": reference, "no_racing": replay(rows, sampling),
                          "racing": replay(rows, sampling, race)})
    return table


def analysis(aa: list[dict], power: list[dict], sampling: Sampling) -> dict:
    """Every replay of the two pools, racing as the search stage does without a reference."""
    race = noise(aa, sampling)
    aa_logs = [r["cand"] / r["base"] for r in aa]
    return {
        "sampling": asdict(sampling), "race_noise_sd": race.noise["w"],
        "aa": {**replay(aa, sampling, race), "median_ratio": statistics.median(aa_logs),
               "share_below_1": sum(r < 1 for r in aa_logs) / len(aa_logs),
               "ratio_spread_mad": statistics.median(abs(r - statistics.median(aa_logs)) for r in aa_logs)},
        "power_0.98pct": replay(power, sampling, noise(power, sampling)),
        "power_curve_from_aa": smallest_detected(aa, sampling),
        "racing": racing(aa, sampling),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, help="measure on this machine's GPU, building here")
    p.add_argument("--pools", type=Path, help="replay recorded pools instead (no GPU needed)")
    p.add_argument("--pairs", type=int, default=150)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    sampling = Sampling()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.pools:
        pools = json.loads(args.pools.read_text())
        result = {"pools": args.pools.name, **analysis(pools["aa"], pools["power"], sampling)}
        (args.out / "measurement_replay.json").write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1))
        return
    if not args.build:
        raise SystemExit("give --build (measure on a GPU) or --pools (replay)")
    gpus = environment.detect_gpus()
    if not gpus:
        raise SystemExit("needs a GPU")
    folder = build(args.build, gpus[0].arch)
    project = load_manifest(folder / "compileiq" / "manifest.json")
    stencil = next(b for b in project.benchmarks if b.name == "stencil")
    exe = Path(stencil.executable)
    deeper = replace(stencil, args=(*stencil.args, "--nz", str(NZ)))
    monitor = GpuMonitor()
    started = time.time()
    aa = pool(stencil, stencil, exe, args.pairs, monitor, seed=1)
    power = pool(stencil, deeper, exe, args.pairs, monitor, seed=2)
    states = [r[k] for r in aa + power for k in ("cand_gpu", "base_gpu")]
    result = {
        "gpu": asdict(gpus[0]), "workload": stencil.workload, "pairs_per_pool": args.pairs,
        "seconds": round(time.time() - started, 1), **analysis(aa, power, sampling),
        "slowdowns_seen": sorted({s for g in states for s in slowdowns(g)}),
        "sm_clock_min_mhz": min(g.get("sm_clock_min_mhz", 0) for g in states),
        "temperature_max_c": max(g.get("temperature_max_c", 0) for g in states),
    }
    (args.out / "measurement_power.json").write_text(json.dumps(result, indent=1))
    (args.out / "measurement_pools.json").write_text(json.dumps({"aa": aa, "power": power}))
    print(json.dumps({k: v for k, v in result.items() if k != "gpu"}, indent=1))


if __name__ == "__main__":
    main()
