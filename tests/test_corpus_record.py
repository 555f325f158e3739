"""The corpus recorder's compile path and tables (benchmarks/corpus_record.py), with real nvcc,
ptxas and cuobjdump on a tiny two-kernel source, and its shim's build (no GPU needed)."""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks import corpus_record as cr
from benchmarks.search_replay import load_table
from compileiq_build.build import codeinfo
from compileiq_build.build.codeinfo import read_code, resource_report
from compileiq_build.build.space import DEFAULT, config_key
from compileiq_build.machine.environment import Gpu, find_tool

# `light` needs few registers (a cap of 32 leaves its code alone); `hungry` keeps 64 values live,
# so a cap of 32 registers changes its code.
SOURCE = """
__global__ void light(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
__global__ void hungry(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v[64];
#pragma unroll
  for (int k = 0; k < 64; ++k) v[k] = x[(i + 131 * k) % n];
  float s = 0.f;
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int k = 0; k < 64; ++k) s += v[k] * v[(k * 7 + r) & 63];
  y[i % n] = s;
}
"""
LIGHT, HUNGRY = "_Z5lightPfPKfi", "_Z6hungryPfPKfi"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> list[cr.Build]:
    nvcc = find_tool("nvcc")
    if not nvcc or not find_tool("cuobjdump"):
        pytest.skip("nvcc or cuobjdump is not installed")
    tmp = tmp_path_factory.mktemp("corpus")
    src = tmp / "two.cu"
    src.write_text(SOURCE)
    dims = cr.dimensions()
    base = {d.key: DEFAULT for d in dims}
    configs = [base, {**base, "CUDA:ptxas-O": "2"}, {**base, "CUDA:maxrregcount": "32"}]
    return cr.compile_all(src, tmp, [], dims, configs, tmp / "cubins", "sm_90", 3, nvcc)


def test_configurations_are_the_baseline_the_moves_and_distinct_draws() -> None:
    dims = cr.dimensions()
    assert dims and not any(d.numerics for d in dims)
    moves = sum(len(d.values) for d in dims)
    configs = cr.configurations(dims, 100, 0)
    assert len(configs) == 1 + moves + 100
    assert all(v == DEFAULT for v in configs[0].values())
    assert all(sum(v != DEFAULT for v in c.values()) == 1 for c in configs[1:1 + moves])
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)
    assert configs == cr.configurations(dims, 100, 0)  # seeded


def test_flags_split_into_cicc_and_ptxas_options() -> None:
    dims = cr.dimensions()
    config = {d.key: DEFAULT for d in dims} | {"CUDA:maxrregcount": "64", "CUDA:dlcm": "cg",
                                               "CUDA:restrict": "on", "CUDA:jump-table-density": "0"}
    cicc, ptxas = cr.split_flags(dims, config)
    assert set(cicc) == {"--restrict", "--jump-table-density=0"}
    assert set(ptxas) == {"--maxrregcount", "64", "-dlcm=cg"}


def test_per_kernel_digests_follow_each_kernels_code(compiled: list[cr.Build]) -> None:
    base, o2, cap = compiled
    assert not (base.error or o2.error or cap.error), [b.error for b in compiled]
    assert set(base.kernels) == {LIGHT, HUNGRY}
    # Identical SASS, different cubins (each records its ptxas options): identical digests.
    assert base.cubin.read_bytes() != cap.cubin.read_bytes()
    assert base.kernels[LIGHT] == cap.kernels[LIGHT] == o2.kernels[LIGHT]
    # A register cap that changes hungry's code changes its digest and the module's.
    assert base.kernels[HUNGRY] != cap.kernels[HUNGRY]
    assert base.digest != cap.digest
    assert cap.features[HUNGRY]["all:registers"] <= 32 < base.features[HUNGRY]["all:registers"]
    assert all(k.startswith("all:") for k in base.features[HUNGRY])


def test_features_are_those_of_read_code(compiled: list[cr.Build]) -> None:
    for b in compiled:
        info = read_code([b.cubin], resource_report(b.log))
        for kernel, feats in b.features.items():
            label = kernel  # short names: the test's are under 60 characters
            assert feats["all:registers"] == info.features[f"{label}:registers"]
            assert feats["all:instructions"] == info.features[f"{label}:instructions"]


def test_ptx_then_ptxas_gives_the_code_of_nvcc_cubin(tmp_path: Path) -> None:
    """The fast path (one PTX per cicc-level combination, then ptxas) compiles what nvcc -cubin
    with the same flags compiles: the SASS is identical (the cubins differ only in the recorded
    `-v`)."""
    nvcc = find_tool("nvcc")
    if not nvcc or not find_tool("cuobjdump"):
        pytest.skip("nvcc or cuobjdump is not installed")
    src = tmp_path / "two.cu"
    src.write_text(SOURCE)
    dims = cr.dimensions()
    config = {d.key: DEFAULT for d in dims} | {"CUDA:maxrregcount": "64", "CUDA:dlcm": "cg",
                                               "CUDA:register-usage-level": "3", "CUDA:restrict": "on"}
    [build] = cr.compile_all(src, tmp_path, [], dims, [config], tmp_path / "fast", "sm_90", 1, nvcc)
    flags = [f for d in dims if (f := d.flag(config[d.key]))]
    ref = tmp_path / "ref.cubin"
    subprocess.run([nvcc, "-O3", "-arch=sm_90", "-cubin", *flags, str(src), "-o", str(ref)],
                   check=True, capture_output=True)
    assert cr.sass_digests(codeinfo.cuobjdump_sass(ref)) == (build.digest, build.kernels)


def test_the_table_holds_what_the_shim_rows_say(compiled: list[cr.Build], tmp_path: Path) -> None:
    dims = cr.dimensions()
    variant_of, measured_as = cr.assign_variants(compiled)
    capped = variant_of[compiled[2].digest]
    assert capped != cr.BASELINE_ID
    # Ten rounds: the baseline drifts; the capped variant's per-round ratios are known.
    ratios = [1.30, 1.10, 1.25, 1.20, 1.15, 1.40, 1.22, 1.05, 1.28, 1.18]
    shim = tmp_path / "shim.csv"
    with shim.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "round", "variant", "ms"])
        for r, ratio in enumerate(ratios):
            base_ms = 0.5 + 0.01 * r
            for v in dict.fromkeys(variant_of.values()):
                w.writerow([HUNGRY, r, v, base_ms * (ratio if v == capped else 1.0)])
    timing = cr.kernel_timing(HUNGRY, cr.read_shim_csv(shim)[HUNGRY])
    assert timing.rounds == 10
    rows = cr.table_rows(dims, compiled, HUNGRY, variant_of, measured_as[HUNGRY], timing)
    path = tmp_path / "t.csv"
    cr.write_table(path, dims, rows)
    table = load_table(path)
    assert len(table.rows) == 3 and table.baseline == 0
    base_ms = sorted(0.5 + 0.01 * r for r in range(10))
    median_base = (base_ms[4] + base_ms[5]) / 2
    s = sorted(ratios)
    median = (s[4] + s[5]) / 2
    # The sign-test interval of the median of 10 pairs at 95%: the 2nd and 9th order statistics.
    spread = (s[8] - s[1]) / 2 / median
    by_regcap = {r["maxrregcount"]: i for i, r in enumerate(table.rows)}
    assert math.isclose(table.times[by_regcap["32"]], median_base * median)
    assert math.isclose(table.spreads[by_regcap["32"]], spread)
    assert math.isclose(table.times[table.baseline], median_base)
    assert table.spreads[table.baseline] is None
    assert table.codes[by_regcap["32"]] == compiled[2].kernels[HUNGRY][:16]
    assert table.features[by_regcap["32"]]["all:registers"] <= 32


def test_each_table_names_the_card_driver_and_nvcc_it_was_recorded_with(
        compiled: list[cr.Build], tmp_path: Path) -> None:
    variant_of, measured_as = cr.assign_variants(compiled)
    shim = tmp_path / "shim.csv"
    with shim.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "round", "variant", "ms"])
        for r in range(10):
            for v in dict.fromkeys(variant_of.values()):
                w.writerow([HUNGRY, r, v, 0.5 + 0.01 * r])
    prog = cr.Program({"project": "P", "program": "two", "dir": ".", "sources": ["two.cu"],
                       "kernel_source": "two.cu", "run": "./prog"}, tmp_path)
    args = argparse.Namespace(arch="sm_90", samples=0, seed=0, gpu="NVIDIA H100 80GB HBM3",
                              driver="580.159.04", nvcc="Build cuda_13.0.r13.0/compiler.36424714_0")
    [stem] = cr.table_program(prog, tmp_path, cr.dimensions(), compiled, variant_of, measured_as, shim, args,
                              lambda _: None)
    meta = json.loads((tmp_path / f"{stem}.json").read_text())
    assert (meta["gpu"], meta["driver"], meta["nvcc"]) == (args.gpu, args.driver, args.nvcc)


def test_several_manifests_each_root_their_programs_and_a_name_twice_is_refused(tmp_path: Path) -> None:
    entry = {"project": "P", "dir": "src", "sources": ["k.cu"], "kernel_source": "k.cu", "run": "./prog"}
    for name, program in (("a", "one"), ("b", "two")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.json").write_text(json.dumps([{**entry, "program": program}]))
    programs = cr.load_manifests([tmp_path / "a" / "m.json", tmp_path / "b" / "m.json"])
    assert [(q.name, q.dir) for q in programs] == [("P__one", tmp_path / "a" / "src"),
                                                   ("P__two", tmp_path / "b" / "src")]
    (tmp_path / "b" / "m.json").write_text(json.dumps([{**entry, "program": "one"}]))
    with pytest.raises(SystemExit, match="P__one: named twice"):
        cr.load_manifests([tmp_path / "a" / "m.json", tmp_path / "b" / "m.json"])


def test_the_recording_gpu_is_the_first_visible_one() -> None:
    def gpu(index: int, name: str) -> Gpu:
        return Gpu(index, name, f"GPU-{index}", "580.159.04", "9.0", "", "", "", "")
    gpus = [gpu(0, "NVIDIA H200"), gpu(1, "NVIDIA H100 80GB HBM3")]
    assert cr.recording_gpu(gpus, "") == gpus[0]
    assert cr.recording_gpu(gpus, "1,0") == gpus[1]
    assert cr.recording_gpu(gpus, "GPU-1") == gpus[1]
    assert cr.recording_gpu(gpus, "7") is None
    assert cr.recording_gpu([], "") is None


def test_the_shim_builds_and_exports_the_runtime_entry_points(tmp_path: Path) -> None:
    nvcc = find_tool("nvcc")
    if not nvcc or not shutil.which("g++") or not shutil.which("nm"):
        pytest.skip("needs nvcc (for the CUDA headers), g++ and nm")
    lib = cr.build_shim(tmp_path)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                             text=True, check=True).stdout.split()
    for name in ("__cudaRegisterFunction", "__cudaRegisterVar", "__cudaGetKernel", "__cudaLaunchKernel",
                 "__cudaLaunchKernel_ptsz", "cudaLaunchKernel", "cudaLaunchKernel_ptsz",
                 "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaMemcpyToSymbol",
                 "cudaMemcpyToSymbolAsync",
                 "cudaFuncSetAttribute", "cudaDeviceReset"):
        assert name in symbols
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True,
                               text=True, check=True).stdout
    assert " cu" not in undefined  # no link to libcudart or libcuda: found at run time


def test_a_table_code_comes_back_from_its_source(tmp_path: Path) -> None:
    """The sample gemm table's code of its best row is what its source compiles to under that
    row's configuration, as `live_vs_table` compiles it to look a live run's find up."""
    if not find_tool("nvcc") or not find_tool("cuobjdump"):
        pytest.skip("nvcc or cuobjdump is not installed")
    from benchmarks.live_vs_table import code_of

    root = Path(__file__).resolve().parents[1]
    table = root / "benchmarks/corpus/tables/sample__gemm__sgemm_reg8x8.csv"
    meta = json.loads(table.with_suffix(".json").read_text())
    with table.open() as f:
        best = min(csv.DictReader(f), key=lambda row: float(row["time"]))
    manifest = tmp_path / "manifest.json"
    entry = {"project": "sample", "program": "gemm", "dir": str(root / "sample_project"),
             "kernel_source": meta["kernel_source"], "nvcc_args": meta["nvcc_args"],
             "sources": meta["kernel_source"], "run": "unused"}
    manifest.write_text(json.dumps([entry]))
    config = {d.name: best[d.name] for d in cr.dimensions()}
    assert config != {name: DEFAULT for name in config}
    assert cr.short_code(code_of(config, meta, manifest)) == best["code"]


def test_densify_measures_the_pairs_of_helpful_moves_and_the_best_rows_less_one_option() -> None:
    """lud_perimeter's best row sets seven options and gains 7%, no one-option move more than 1.4%:
    the configurations that say how (issue 42's corpus, open_eval's `reach`) are those rows less
    one option, and the pairs of the moves that helped."""
    path = Path(__file__).parents[1] / "benchmarks" / "corpus" / "tables" / "Rodinia__lud__lud_perimeter.csv"
    dims = cr.dimensions()
    table = load_table(path)
    base = table.times[table.baseline]
    dense = cr.dense_configurations(dims, [path], pairs_of=3, best_rows=2)
    assert all(set(c) == {d.key for d in dims} for c in dense)
    as_rows = [{d.name: c[d.key] for d in dims} for c in dense]
    assert not any(r in table.rows for r in as_rows if sum(v != DEFAULT for v in r.values()) == 2)
    set_ = [{n: v for n, v in r.items() if v != DEFAULT} for r in as_rows]
    # The two fastest rows of several options, each less one option in turn.
    best = sorted((t, i) for i, (t, row) in enumerate(zip(table.times, table.rows, strict=True))
                  if sum(v != DEFAULT for v in row.values()) >= 2)[:2]
    for _, i in best:
        row = {n: v for n, v in table.rows[i].items() if v != DEFAULT}
        for n in row:
            assert {k: v for k, v in row.items() if k != n} in set_, n
    # Pairs of the most helpful moves (up to three options): here the cap and -O1 alone are
    # faster beyond their spread, so one pair.
    helpful = set()
    for i, row in enumerate(table.rows):
        moved = [n for n, v in row.items() if v != DEFAULT]
        if len(moved) == 1 and table.times[i] / base < 1 - max(table.spreads[i] or 0, cr.NOISE_FLOOR):
            helpful.add(moved[0])
    assert helpful == {"maxrregcount", "ptxas-O"}
    pairs = [s for s in set_ if len(s) == 2]
    assert len(pairs) == 1 and set(pairs[0]) == helpful
    assert len(dense) == len(pairs) + sum(sum(v != DEFAULT for v in table.rows[i].values()) for _, i in best)


def test_densify_adds_what_the_tables_leave_out_to_a_programs_configurations(tmp_path: Path) -> None:
    """`--densify`: a program's configurations are the baseline and the moves, then the pairs of
    the helpful moves and the best rows less one option of its tables recorded before (another
    program's table is not its)."""
    prog = cr.Program({"project": "t", "program": "two", "dir": "p", "sources": "two.cu",
                       "kernel_source": "two.cu", "run": "./prog"}, tmp_path)
    dims = cr.dimensions()
    names = [d.name for d in dims]
    tables = tmp_path / "tables"
    tables.mkdir()
    def table(stem: str, rows: list[tuple[dict[str, str], float]]) -> None:
        with (tables / f"{stem}.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, [*names, "time", "code", "spread"])
            writer.writeheader()
            writer.writerows({**{n: DEFAULT for n in names}, **opts, "time": t, "code": "c", "spread": 0.001}
                             for opts, t in rows)

    table(f"{prog.name}__hungry", [({}, 1.0), ({"maxrregcount": "32"}, 0.9), ({"ptxas-O": "1"}, 0.95),
                                   ({"ptxas-O": "1", "maxrregcount": "32", "dlcm": "cg"}, 0.8)])
    table("t__other__hungry", [({}, 1.0), ({"dlcm": "cs"}, 0.9), ({"dscm": "cs"}, 0.9)])  # another program's
    said: list[str] = []
    args = argparse.Namespace(samples=0, seed=0, densify=tables)
    configs = cr.program_configurations(prog, dims, args, said.append)
    built = [{k.split(":", 1)[1]: v for k, v in c.items() if v != DEFAULT} for c in configs]
    assert len(built) == 1 + sum(len(d.values) for d in dims) + 3
    assert built[-3:] == [{"ptxas-O": "1", "maxrregcount": "32"}, {"maxrregcount": "32", "dlcm": "cg"},
                          {"ptxas-O": "1", "dlcm": "cg"}]
    assert any("3 configurations more from 1 tables" in line for line in said), said


def test_densify_takes_every_table_of_a_program() -> None:
    """A program of several kernels (lud: three tables) densifies each: what each table asks, all
    of it (the second table once broke on a name the first one's loop had rebound)."""
    tables = Path(__file__).parents[1] / "benchmarks" / "corpus" / "tables"
    paths = [tables / f"Rodinia__lud__lud_{k}.csv" for k in ("diagonal", "perimeter")]
    dims = cr.dimensions()
    each = [{config_key(c) for c in cr.dense_configurations(dims, [p])} for p in paths]
    both = {config_key(c) for c in cr.dense_configurations(dims, paths)}
    assert both == each[0] | each[1] and not each[1] <= each[0]
