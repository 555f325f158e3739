"""Command line: `python -m compileiq_build <verb> ...`.  Thin: each verb calls one module."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, fields
from pathlib import Path
from typing import Any, TypeAlias

from compileiq_build import __version__, cmake_dir
from compileiq_build.errors import CompileIQError
from compileiq_build.options import DEMO_DEFAULTS, GROUPS, TuneOptions


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m compileiq_build",
        description="Tune compiler flags of CUDA and C++ CMake targets by measuring them.")
    p.add_argument("--version", action="version", version=f"compileiq_build {__version__}")
    p.add_argument("--cmake-dir", action="store_true",
                   help="print the folder holding CompileIQConfig.cmake and CompileIQ.cmake")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    for add in (_tune_parser, _profile_parser, _report_parser, _learn_parser, _emit_parser,
                _check_parser, _space_parser, _doctor_parser, _demo_parser):
        add(verbs)
    return p


# What add_subparsers returns: each verb adds its own parser to it.
_Verbs: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class _Words(argparse.Action):
    """A list option (--targets, --dimensions): words separated by spaces or commas, the option
    repeatable.  Each occurrence's words are kept, so that a BUILD_DIR written after them (which
    argparse hands to the list) can be taken back (`_build_dir_after_words`)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        given = [str(v) for v in (values if isinstance(values, list) else [values])]
        words = [w for v in given for w in v.split(",") if w]
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or ()), *words])
        namespace._word_groups = [*getattr(namespace, "_word_groups", []), (self.dest, given)]


def _build_dir_after_words(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """`tune --targets a b BUILD_DIR`: the list took the folder; the last word of the last list
    of two words or more is BUILD_DIR."""
    if args.verb not in ("tune", "profile", "check") or args.build_dir is not None:
        return
    groups = [g for g in getattr(args, "_word_groups", []) if len(g[1]) > 1]
    if not groups:
        verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        verbs.choices[args.verb].error("the following arguments are required: BUILD_DIR")
    dest, words = groups[-1]
    values = getattr(args, dest)
    taken = words[-1]
    setattr(args, dest, values[:len(values) - len([w for w in taken.split(",") if w])])
    args.build_dir = Path(taken)


def _tune_parser(verbs: _Verbs) -> None:
    t = verbs.add_parser("tune", help="search, measure, validate and write the toolchain file")
    t.add_argument("build_dir", type=Path, metavar="BUILD_DIR", nargs="?")
    _tune_arguments(t)


def _profile_parser(verbs: _Verbs) -> None:
    pr = verbs.add_parser("profile", help="where the benchmarks' GPU time goes (ncu), and the "
                          "groups of sources that suggests")
    pr.add_argument("build_dir", type=Path, metavar="BUILD_DIR", nargs="?")
    options = _option_fields("targets", "gpus", "allow_shared_gpu")
    _option_argument(pr, options["targets"], help="only these CUDA targets or groups")
    _option_argument(pr, options["gpus"], help="profile on the first of these GPUs")
    _option_argument(pr, options["allow_shared_gpu"], help="profile although another process holds the GPU")


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


def _check_parser(verbs: _Verbs) -> None:
    c = verbs.add_parser("check", help="do the committed toolchain file's flags still beat the project's "
                         "own? (exit 0: yes; 1: one loses or fails; 3: a tuned code changed since; "
                         "4: the time limit came first; for a nightly CI job)")
    c.add_argument("build_dir", type=Path, metavar="BUILD_DIR", nargs="?")
    c.add_argument("--toolchain", type=Path, metavar="FILE", help="the toolchain file to check (default: "
                   "compileiq-toolchain.cmake in the project's source folder)")
    options = _option_fields("targets", "time_limit", "repeats", "max_repeats", "precision", "gpus",
                             "allow_shared_gpu", "build_timeout")
    for name in options:
        _option_argument(c, options[name], help={
            "targets": "check only these targets or groups",
            "gpus": "measure on the first of these GPUs (default: the first GPU)",
            "time_limit": "end the check within this long (90s, 30m, 4m30s, 2h); targets not reached are "
                          "reported unchecked (exit 4)",
            "repeats": "paired runs per workload, at least, as tune's: check, as tune's validation, "
                       "measures twice this (default %(default)s)"}.get(name))


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
    _tune_arguments(d, DEMO_DEFAULTS)


def _tune_arguments(p: argparse.ArgumentParser, defaults: Mapping[str, object] | None = None) -> None:
    """tune's and demo's options, one per field of TuneOptions with a flag, group by group
    (`defaults`: the demo's own, by field name)."""
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for group in GROUPS:
        for f in fields(TuneOptions):
            if f.metadata.get("group") == group:
                _option_argument(p, f, defaults, exclusive)
    p.add_argument("--yes", action="store_true", help="do not ask before --fresh discards results")


def _option_argument(p: argparse.ArgumentParser, f: Field[Any], defaults: Mapping[str, object] | None = None,
                     exclusive: dict[str, argparse._MutuallyExclusiveGroup] | None = None,
                     help: str | None = None) -> None:
    """The flag of a field of TuneOptions, as its metadata (options.Option) describes it, with
    the field's default unless `defaults` names another."""
    meta: Mapping[str, Any] = f.metadata
    default = (defaults or {}).get(f.name, f.default)
    target: argparse._ActionsContainer = p
    if "exclusive" in meta and exclusive is not None:
        if meta["exclusive"] not in exclusive:
            exclusive[meta["exclusive"]] = p.add_mutually_exclusive_group()
        target = exclusive[meta["exclusive"]]
    if "negation" in meta:
        flag, text = meta["negation"]
        target.add_argument(flag, dest=f.name, action="store_const", const=default, default=default,
                            help=text)
    kwargs = {key: meta[key] for key in ("type", "metavar", "nargs", "choices") if key in meta}
    if isinstance(default, bool):
        kwargs["action"] = "store_false" if default else "store_true"
    if meta.get("nargs") == "+":
        kwargs["action"] = _Words
    target.add_argument(meta["flag"], dest=f.name, default=default, help=help or meta["help"], **kwargs)


def _option_fields(*names: str) -> dict[str, Field[Any]]:
    return {f.name: f for f in fields(TuneOptions) if f.name in names}


def _tune_options(args: argparse.Namespace) -> TuneOptions:
    return TuneOptions(**{f.name: getattr(args, f.name) for f in fields(TuneOptions) if "flag" in f.metadata})


def _confirm_fresh(args: argparse.Namespace, build_dir: Path) -> None:
    from compileiq_build.project.workspace import Workspace

    store = Workspace(build_dir).store
    if not args.fresh or args.yes or not store.exists():
        return
    if not sys.stdin.isatty():
        raise CompileIQError("--fresh discards the stored results; add --yes to confirm.")
    answer = input(f"Discard the stored results in {store}? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise CompileIQError("kept the stored results; nothing was done.")


def _print_pending(decisions) -> None:
    from compileiq_build.results.report import pending_text

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
    from compileiq_build.results.progress import Reporter
    from compileiq_build.stages.tune import tune

    _confirm_fresh(args, args.build_dir)
    _print_result(tune(args.build_dir, _tune_options(args), Reporter(), command))
    return 0


def _profile(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.results.progress import Reporter
    from compileiq_build.stages.tune import profile

    options = TuneOptions(targets=args.targets, gpus=args.gpus, allow_shared_gpu=args.allow_shared_gpu)
    print("\n".join(profile(args.build_dir, options, Reporter(), command)) or
          "no source of the tuned targets holds the profiled kernels")
    return 0


def _demo(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.demo import demo
    from compileiq_build.results.progress import Reporter

    if args.workdir:
        _confirm_fresh(args, args.workdir / "build")
    _print_result(demo(args.workdir, _tune_options(args), Reporter(), command))
    return 0


def _report(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.results.report import export, html, report, table

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
    from compileiq_build.search.learn import learn

    done = learn(args.corpus, args.add, args.output)
    print(f"prior written to {done.path}: {done.kernels} kernels of {len(done.projects)} projects, "
          f"{done.rows} configurations, {done.seconds:.1f} s")
    return 0


def _emit(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.results.report import emit

    path, decisions = emit(args.build_dir, args.output, args.merge)
    _print_pending(decisions)
    print(f"toolchain file: {path}")
    return 0


def _space(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.results.report import show_space

    print(show_space(args.language or ["CUDA", "CXX"], args.allow_numerics_change,
                     args.allow_host_specific, lambda text: print(text, file=sys.stderr, flush=True)))
    return 0


def _check(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.results.progress import Reporter
    from compileiq_build.stages.check import check

    options = TuneOptions(**{f.name: getattr(args, f.name) for f in fields(TuneOptions)
                             if hasattr(args, f.name)})
    result = check(args.build_dir, args.toolchain, options, Reporter(), command)
    for verdict in result.verdicts:
        print(verdict.text)
    print(f"check of {result.toolchain}: exit code {result.exit_code}")
    return result.exit_code


def _doctor(args: argparse.Namespace, command: str) -> int:
    from compileiq_build.doctor import doctor

    text, ok = doctor(args.build_dir)
    print(text)
    return 0 if ok else 1


# Each verb's function: it imports its module when it runs, so that --help stays fast.
_VERBS: dict[str, Callable[[argparse.Namespace, str], int]] = {
    "tune": _tune, "profile": _profile, "demo": _demo, "report": _report, "learn": _learn,
    "emit": _emit, "check": _check, "space": _space, "doctor": _doctor}


def _negative_values(argv: Sequence[str]) -> list[str]:
    """`--time-limit -5m` as `--time-limit=-5m`: argparse takes a word starting with '-' that is
    not a plain number for an option, and says only 'expected one argument'; the option's own
    check then says what is wrong with the value."""
    valued = {f.metadata["flag"] for f in fields(TuneOptions) if "type" in f.metadata}
    out: list[str] = []
    for word in argv:
        if out and out[-1] in valued and re.match(r"-[0-9.]", word):
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(_negative_values(argv))
    _build_dir_after_words(parser, args)
    try:
        return _run(args, argv)
    except CompileIQError as exc:
        print(f"compileiq_build: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("compileiq_build: interrupted; every finished measurement is in the store. "
              "Run the same command again to resume.", file=sys.stderr)
        return 130
