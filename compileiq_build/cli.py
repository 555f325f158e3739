"""Command line: `python -m compileiq_build <verb> ...`.  Thin: each verb calls one module."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeAlias

from compileiq_build import __version__, cmake_dir
from compileiq_build.errors import CompileIQError
from compileiq_build.strategies import STRATEGIES


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _count(text: str) -> int:
    """A whole number, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return int(text)


def _fraction(text: str) -> float:
    """A relative width between 0 and 1 (0.005 = 0.5%)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number like 0.005") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must lie between 0 and 1 (0.005 = 0.5%)")
    return value


def _duration(text: str) -> float:
    """Seconds, or a number with s/m/h: 90, 90s, 30m, 2h."""
    scale = {"s": 1, "m": 60, "h": 3600}
    unit = text[-1:].lower()
    number = text[:-1] if unit in scale else text
    try:
        value = float(number) * scale.get(unit, 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 30m or 2h") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m compileiq_build",
        description="Tune compiler flags of CUDA and C++ CMake targets by measuring them.")
    p.add_argument("--version", action="version", version=f"compileiq_build {__version__}")
    p.add_argument("--cmake-dir", action="store_true",
                   help="print the folder holding CompileIQConfig.cmake and CompileIQ.cmake")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    for add in (_tune_parser, _profile_parser, _report_parser, _learn_parser, _emit_parser,
                _space_parser, _doctor_parser, _demo_parser):
        add(verbs)
    return p


# What add_subparsers returns: each verb adds its own parser to it.
_Verbs: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _tune_parser(verbs: _Verbs) -> None:
    t = verbs.add_parser("tune", help="search, measure, validate and write the toolchain file")
    t.add_argument("build_dir", type=Path, metavar="BUILD_DIR")
    _tune_arguments(t)


def _profile_parser(verbs: _Verbs) -> None:
    pr = verbs.add_parser("profile", help="where the benchmarks' GPU time goes (ncu), and the "
                          "groups of sources that suggests")
    pr.add_argument("build_dir", type=Path, metavar="BUILD_DIR")
    pr.add_argument("--targets", nargs="+", default=[], metavar="TARGET",
                    help="only these CUDA targets or groups")
    pr.add_argument("--gpus", type=_gpu_list, default=(), metavar="LIST",
                    help="profile on the first of these GPUs")
    pr.add_argument("--allow-shared-gpu", action="store_true",
                    help="profile although another process holds the GPU")


def _report_parser(verbs: _Verbs) -> None:
    r = verbs.add_parser("report", help="summarise the stored results of a build folder")
    r.add_argument("build_dir", type=Path, metavar="BUILD_DIR")
    r.add_argument("--csv", type=Path, metavar="PATH", help="also export every measurement as CSV")
    r.add_argument("--parquet", type=Path, metavar="PATH", help="also export every measurement as Parquet")
    r.add_argument("--html", type=Path, metavar="PATH",
                   help="also write a self-contained HTML report with charts")
    r.add_argument("--table", type=Path, metavar="PATH",
                   help="also write the search's measurements as a replay table (CSV)")
    r.add_argument("--target", help="the target of --table, when several were tuned")


def _learn_parser(verbs: _Verbs) -> None:
    ln = verbs.add_parser("learn", help="fit the prior (a LightGBM model of what options do to kinds of "
                          "code) on the corpus of measured kernels and your own stores")
    ln.add_argument("--corpus", type=Path, nargs="+", default=[], metavar="DIR",
                    help="folders of corpus tables (default: benchmarks/corpus/tables of this checkout)")
    ln.add_argument("--add", type=Path, nargs="+", default=[], metavar="BUILD_DIR",
                    help="also learn from the searches stored in these build folders")
    ln.add_argument("--output", type=Path, help="model file to write (default: the one shipped in the "
                    "package; with --add, <first BUILD_DIR>/compileiq/prior.txt, which tune of that "
                    "folder loads)")


def _emit_parser(verbs: _Verbs) -> None:
    e = verbs.add_parser("emit", help="write the toolchain file again from stored results")
    e.add_argument("build_dir", type=Path, metavar="BUILD_DIR")
    e.add_argument("--output", type=Path, help="where to write (default: the project's "
                   "source folder, compileiq-toolchain.cmake)")
    e.add_argument("--merge", type=Path, nargs="+", default=[], metavar="STORE",
                   help="results stores (results.sqlite, or the build folders holding them) of "
                   "other machines, one per GPU architecture, to combine with this one")


def _space_parser(verbs: _Verbs) -> None:
    s = verbs.add_parser("space", help="show the flag space this machine's compilers accept")
    s.add_argument("--language", choices=("CUDA", "CXX"), action="append",
                   help="only this language (repeatable; default: both)")
    s.add_argument("--allow-numerics-change", action="store_true")
    s.add_argument("--allow-host-specific", action="store_true")


def _doctor_parser(verbs: _Verbs) -> None:
    doc = verbs.add_parser("doctor", help="what is installed, which GPU, what is missing")
    doc.add_argument("build_dir", type=Path, nargs="?", metavar="BUILD_DIR",
                     help="also check that this build folder was configured with CompileIQ")


def _demo_parser(verbs: _Verbs) -> None:
    d = verbs.add_parser("demo", help="tune the bundled sample_project end to end")
    d.add_argument("--workdir", type=Path,
                   help="folder for the copy of sample_project and its builds (default: a new "
                   "temporary folder)")
    # Six candidates are few for the model's phases; staged's single changes found gemm's gain.
    _tune_arguments(d, budget=6, strategy="staged")


def _tune_arguments(p: argparse.ArgumentParser, budget: int = 20, strategy: str = "model") -> None:
    """tune's and demo's options, grouped in the order --help lists them: the search, where it
    builds and measures, how it measures, and what the search starts from."""
    _search_arguments(p, budget, strategy)
    _where_arguments(p)
    _measuring_arguments(p)
    _start_arguments(p)


def _search_arguments(p: argparse.ArgumentParser, budget: int, strategy: str) -> None:
    p.add_argument("--budget", type=_positive_int, default=budget,
                   help=f"evaluations per target: distinct machine codes measured; a candidate whose "
                   f"code was measured before costs a compile only (default {budget})")
    p.add_argument("--max-candidates", type=_positive_int, metavar="N",
                   help="candidates compiled per target, at most (default 10 times the budget)")
    p.add_argument("--time-limit", type=_duration,
                   help="end the run within this long (90s, 30m, 2h): the search stops early enough "
                        "to validate its best candidate")
    p.add_argument("--strategy", choices=STRATEGIES, default=strategy,
                   help=f"search strategy (default {strategy}; model: one-option moves, their combination, "
                   "then a model of the measurements; survey: every one-option move, then a uniform "
                   "sample, to map a space)")
    p.add_argument("--targets", nargs="+", default=[], metavar="TARGET",
                   help="tune only these targets or groups (<target>:<group>; a target names all its groups)")
    p.add_argument("--dimensions", nargs="+", default=[], metavar="NAME",
                   help="search only these dimensions of the space (names as `space` prints them)")
    p.add_argument("--output", type=Path, help="toolchain file to write (default: "
                   "compileiq-toolchain.cmake in the project's source folder)")


def _where_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=_positive_int,
                   help="candidates compiled at once, each in its own build tree, while the benchmarks "
                   "of others run; shared among the GPUs (default: a quarter of the cores, at most 8)")
    p.add_argument("--gpus", type=_gpu_list, default=(), metavar="LIST",
                   help="GPUs to measure on, one worker each, as nvidia-smi numbers them: 0,1 "
                   "(default: every GPU of the first one's kind that CUDA_VISIBLE_DEVICES allows)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="build and measure on the nodes of this Ray cluster, one worker per GPU "
                   "('local' starts one here; needs compileiq-build[ray] on every node, and the "
                   "project at the same path on each); --jobs is then per worker (default 2)")
    p.add_argument("--build-timeout", type=_duration, help="stop a candidate's build after this long "
                   "(default: 20 times the baseline build, at least 5 minutes)")


def _measuring_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeats", type=_positive_int, default=5,
                   help="paired candidate/baseline runs per workload, at least (default 5)")
    p.add_argument("--max-repeats", type=_positive_int, default=20,
                   help="... and at most, while the comparison is undecided (default 20)")
    p.add_argument("--precision", type=_fraction, default=0.005,
                   help="stop pairing once the 95%% interval of the ratio is narrower than this, "
                   "or once the candidate cannot beat the best so far by this much (default "
                   "0.005 = 0.5%%)")
    p.add_argument("--allow-numerics-change", action="store_true",
                   help="also try options that change floating-point results (fast math, ...)")
    p.add_argument("--allow-host-specific", action="store_true",
                   help="also try options tied to this machine's CPU (-march=native): the binaries "
                   "then run only on CPUs like this one, and the toolchain file says so")
    p.add_argument("--compile-ahead", type=_count, default=5, metavar="N",
                   help="CUDA targets: while the GPU measures, compile up to N configurations per "
                   "evaluation of the budget ahead, for their machine code and features (default 5; "
                   "0: off)")
    p.add_argument("--no-profile", dest="profile", action="store_false",
                   help="do not profile the benchmarks' baseline with ncu before searching CUDA targets")
    p.add_argument("--allow-shared-gpu", action="store_true",
                   help="measure although another process holds the GPU (the report says so)")


def _start_arguments(p: argparse.ArgumentParser) -> None:
    prior = p.add_mutually_exclusive_group()
    prior.add_argument("--no-prior", dest="prior", action="store_false", default=True,
                       help="start the model-guided search without the prior learned across kernels")
    prior.add_argument("--prior", dest="prior_path", type=Path, metavar="PATH",
                       help="the prior's model file (default: BUILD_DIR/compileiq/prior.txt if "
                       "`learn --add` wrote one, else the one shipped)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the strategies that draw at random (model, random, survey)")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("--resume", dest="fresh", action="store_false", default=False,
                        help="continue from the stored results (default)")
    resume.add_argument("--fresh", dest="fresh", action="store_true",
                        help="discard the stored results of this build folder and start over")
    p.add_argument("--yes", action="store_true", help="do not ask before --fresh discards results")


def _gpu_list(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(f"expected GPU numbers separated by commas (0,1), got {text!r}")
    return tuple(int(p) for p in parts)


def _tune_options(args: argparse.Namespace):
    from compileiq_build.options import TuneOptions

    return TuneOptions(
        budget=args.budget, max_candidates=args.max_candidates, time_limit=args.time_limit,
        strategy=args.strategy,
        targets=args.targets, output=args.output.resolve() if args.output else None,
        jobs=args.jobs, gpus=args.gpus, ray=args.ray, build_timeout=args.build_timeout, repeats=args.repeats,
        max_repeats=args.max_repeats, precision=args.precision, dimensions=args.dimensions,
        allow_numerics_change=args.allow_numerics_change, allow_host_specific=args.allow_host_specific,
        allow_shared_gpu=args.allow_shared_gpu, profile=args.profile, compile_ahead=args.compile_ahead,
        fresh=args.fresh, seed=args.seed, prior=args.prior,
        prior_path=args.prior_path.resolve() if args.prior_path else None)


def _confirm_fresh(args: argparse.Namespace, build_dir: Path) -> None:
    from compileiq_build.workspace import STORE

    if not args.fresh or args.yes or not (build_dir / STORE).exists():
        return
    if not sys.stdin.isatty():
        raise CompileIQError("--fresh discards the stored results; add --yes to confirm.")
    answer = input(f"Discard the stored results in {build_dir / STORE}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise CompileIQError("kept the stored results; nothing was done.")


def _print_pending(decisions) -> None:
    from compileiq_build.report import pending_text

    for d in decisions:
        if d.pending:
            print(f"{d.target}: {pending_text(d)}")


def _print_result(result) -> None:
    for w in result.winners:
        print(f"{w.target}: {w.speedup:.3f}x with {' '.join(f for fl in w.flags.values() for f in fl)}")
    for n in result.losers:
        print(f"{n.target}: unchanged ({n.reason})")
    _print_pending([*result.winners, *result.losers])
    if result.toolchain is None:  # the demo's temporary folder
        print("the demo ran in a temporary folder, now removed; --workdir DIR keeps its build, "
              "results and toolchain file")
        return
    print(f"toolchain file: {result.toolchain}")
    print(f"build with it:  cmake -S <source> -B <build> -G Ninja "
          f"-DCMAKE_TOOLCHAIN_FILE={result.toolchain}")


def _run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.cmake_dir:
        print(cmake_dir())
        return 0
    if args.verb is None:
        _parser().print_help()
        return 2
    command = "python -m compileiq_build " + shlex.join(argv)
    return _VERBS[args.verb](args, command)


def _tune(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.progress import Reporter
    from compileiq_build.tune import tune

    _confirm_fresh(args, args.build_dir.resolve())
    _print_result(tune(args.build_dir, _tune_options(args), Reporter(), command))
    return 0


def _profile(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.options import TuneOptions
    from compileiq_build.progress import Reporter
    from compileiq_build.tune import profile

    options = TuneOptions(targets=args.targets, gpus=args.gpus, allow_shared_gpu=args.allow_shared_gpu)
    print("\n".join(profile(args.build_dir, options, Reporter(), command)) or
          "no source of the tuned targets holds the profiled kernels")
    return 0


def _demo(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.demo import demo
    from compileiq_build.progress import Reporter

    if args.workdir:
        _confirm_fresh(args, (args.workdir / "build").resolve())
    _print_result(demo(args.workdir, _tune_options(args), Reporter(), command))
    return 0


def _report(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.report import export, html, report, table

    print(report(args.build_dir))
    if args.table:
        print(f"{table(args.build_dir, args.table, args.target)} configurations written to {args.table}")
    if args.html:
        print(f"HTML report written to {html(args.build_dir, args.html)}")
    if args.csv or args.parquet:
        rows = export(args.build_dir, args.csv, args.parquet)
        for path in (args.csv, args.parquet):
            if path:
                print(f"{rows} measurements written to {path}")
    return 0


def _learn(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.learn import learn

    done = learn(args.corpus, args.add, args.output)
    print(f"prior written to {done.path}: {done.kernels} kernels of {len(done.projects)} projects, "
          f"{done.rows} configurations, {done.seconds:.1f} s")
    return 0


def _emit(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.report import emit

    path, decisions = emit(args.build_dir, args.output, args.merge)
    _print_pending(decisions)
    print(f"toolchain file: {path}")
    return 0


def _space(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.report import show_space

    print(show_space(args.language or ["CUDA", "CXX"], args.allow_numerics_change,
                     args.allow_host_specific, lambda text: print(text, file=sys.stderr, flush=True)))
    return 0


def _doctor(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.doctor import doctor

    text, ok = doctor(args.build_dir)
    print(text)
    return 0 if ok else 1


# Each verb's function: it imports its module when it runs, so that --help stays fast.
_VERBS: dict[str, Callable[[argparse.Namespace, str], int]] = {
    "tune": _tune, "profile": _profile, "demo": _demo, "report": _report, "learn": _learn,
    "emit": _emit, "space": _space, "doctor": _doctor}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        return _run(args, argv)
    except CompileIQError as exc:
        print(f"compileiq_build: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("compileiq_build: interrupted; every finished measurement is in the store. "
              "Run the same command again to resume.", file=sys.stderr)
        return 130
