"""TuneOptions is the one source of tune's options: the CLI's flags, defaults, validation and help
come from its fields, so the two cannot drift."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import pytest

from compileiq_build.cli import _parser, _tune_options, main
from compileiq_build.options import DEMO_DEFAULTS, GROUPS, TuneOptions

FLAGGED = [f for f in fields(TuneOptions) if "flag" in f.metadata]


def _parsed(*argv: str):
    return _parser().parse_args(list(argv))


def test_every_field_default_is_its_flags_parsed_default():
    tune, demo = _parsed("tune", "build"), _parsed("demo")
    for f in FLAGGED:
        assert getattr(tune, f.name) == f.default, f.name
        assert getattr(demo, f.name) == DEMO_DEFAULTS.get(f.name, f.default), f.name
    assert _tune_options(tune) == TuneOptions()
    assert _tune_options(demo) == TuneOptions(**DEMO_DEFAULTS)
    profile = _parsed("profile", "build")
    for name in ("targets", "gpus", "allow_shared_gpu"):
        assert getattr(profile, name) == getattr(TuneOptions(), name)


def test_every_flag_has_a_group_and_help_and_only_internal_fields_have_none():
    assert {f.name for f in fields(TuneOptions)} - {f.name for f in FLAGGED} == {
        "max_stage", "measure_time_cap"}
    for f in FLAGGED:
        assert f.metadata["group"] in GROUPS and f.metadata["help"], f.name
    assert set(DEMO_DEFAULTS) <= {f.name for f in FLAGGED}


def _help(verb: str, capsys) -> str:
    with pytest.raises(SystemExit):
        main([verb, "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_help_states_the_fields_defaults(capsys):
    tune, demo = _help("tune", capsys), _help("demo", capsys)
    defaults = TuneOptions()
    assert f"only (default {defaults.budget})" in tune and f"(default {DEMO_DEFAULTS['budget']})" in demo
    assert f"search strategy (default {defaults.strategy};" in tune
    assert f"search strategy (default {DEMO_DEFAULTS['strategy']};" in demo
    assert f"default {defaults.precision})" in tune and f"(default {defaults.compile_ahead}; 0: off)" in tune
    assert "(default 0)" in tune and "staged and exhaustive draw nothing" in tune  # --seed


@pytest.mark.parametrize(("args", "text"), [
    (["--precision", "-1"], "argument --precision: '-1' must lie between 0 and 1"),
    (["--precision=-0.01"], "argument --precision: '-0.01' must lie between 0 and 1"),
    (["--precision", "0"], "must lie between 0 and 1"),
    (["--compile-ahead", "-2"], "argument --compile-ahead: '-2' is not a whole number of 0 or more"),
    (["--compile-ahead=-1"], "argument --compile-ahead: '-1' is not a whole number of 0 or more"),
    (["--resume", "--fresh"], "argument --fresh: not allowed with argument --resume"),
])
def test_out_of_range_values_exit_2_with_the_reason(args, text, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "build", *args])
    assert exit_.value.code == 2
    assert text in capsys.readouterr().err


def test_resume_is_the_default_made_explicit():
    assert _parsed("tune", "b", "--resume").fresh is False is _parsed("tune", "b").fresh
    assert _parsed("tune", "b", "--fresh").fresh is True


def test_paths_are_made_absolute_and_values_parsed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = _tune_options(_parsed("tune", "b", "--output", "t.cmake", "--prior", "p.txt", "--gpus", "0,1",
                                    "--time-limit", "30m", "--no-profile", "--seed", "3"))
    assert options.output == tmp_path / "t.cmake" and options.prior_path == tmp_path / "p.txt"
    assert options.gpus == (0, 1) and options.time_limit == 1800 and not options.profile
    assert options.seed == 3


def test_help_loads_no_heavy_module():
    code = ("import sys; from compileiq_build.cli import _parser; _parser().parse_args(['tune', 'b']); "
            "print(sorted({'numpy', 'pandas', 'lightgbm'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200),
                                                ("4m30s", 270), ("1h15m", 4500), ("1.5h", 5400)])
def test_time_limit_takes_durations_as_people_write_them(text, seconds):
    assert _parsed("tune", "build", "--time-limit", text).time_limit == seconds


@pytest.mark.parametrize("text", ["", "m", "4x", "30s5m", "-5", "-5m", "0s"])
def test_a_time_limit_that_is_no_positive_duration_is_a_usage_error(text, capsys):
    with pytest.raises(SystemExit) as exc:
        _parsed("tune", "build", "--time-limit", text)
    assert exc.value.code == 2 and "--time-limit" in capsys.readouterr().err
