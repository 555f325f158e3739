"""The manifest reader: every malformed manifest is a CompileIQError, never a crash."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compileiq_build.errors import CompileIQError
from compileiq_build.project.manifest import c_identifier, field_table, parse_manifest

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                      max_size=4),
    max_leaves=20)

VALID = {
    "schema": 1, "source_dir": "/src", "binary_dir": "/b", "generator": "Ninja",
    "compilers": {"CXX": {"id": "GNU", "version": "12", "path": "/usr/bin/c++"}},
    "targets": [{"name": "lib", "id": "lib", "type": "STATIC_LIBRARY", "languages": ["CXX"],
                 "per_language": {"CXX": {"arch_key": "x86_64", "applied_flags": []}}}],
    "benchmarks": [{"name": "b", "executable": "/b/exe", "args": ["--n", "4"], "targets": ["lib"],
                    "format": "time", "unit": "s", "timeout": "30"}],
}


def test_valid_manifest():
    p = parse_manifest(json.loads(json.dumps(VALID)))
    assert p.targets[0].arch_keys == {"CXX": "x86_64"}
    assert p.benchmarks[0].timeout == 30.0
    assert p.benchmarks[0].workload == "b[--n 4]"


WHERE = "build/compileiq/manifest.json"
# A clear error names the file (and the entry: "targets[0].per_language.CXX"), then says which
# of the ways a manifest can be wrong this one is.
CLEAR = re.compile(r"build/compileiq/manifest\.json(: .*)?"
                   r"( has manifest schema .*, this compileiq_build reads schema \d+\. Re-configure"
                   r"| has no '\w+' \(.*Re-run the CMake configure step"
                   r"|: expected a JSON object, got \w+$"
                   r"|: '\w+' should be (a|an|true) "
                   r"|: timeout .+ is not a number$"
                   r"|: unknown (format|unit) .+$"
                   r"|: a target without a name$)", re.S)


def _clear(message: str) -> bool:
    return CLEAR.match(message) is not None


@given(JSON)
def test_any_json_is_a_project_or_a_clear_error(raw):
    try:
        parse_manifest(raw, WHERE)
    except CompileIQError as exc:
        assert _clear(str(exc)), str(exc)


@given(st.sampled_from(["targets", "benchmarks", "compilers"]), JSON)
def test_hostile_sections_of_a_valid_manifest(section, value):
    raw = json.loads(json.dumps(VALID))
    raw[section] = value
    try:
        parse_manifest(raw, WHERE)
    except CompileIQError as exc:
        assert _clear(str(exc)), str(exc)


def test_an_unclear_error_is_told_apart():
    assert _clear(f"{WHERE}: targets[0]: 'name' should be a string, got 3")
    assert _clear(f"{WHERE}: expected a JSON object, got list")
    assert not _clear("KeyError: 'name'") and not _clear(f"{WHERE}: list index out of range")


def test_c_identifier_matches_cmake():
    assert c_identifier("my-lib.v2") == "my_lib_v2"
    assert c_identifier("3d") == "_3d"


def test_project_name_with_a_fallback_for_older_manifests():
    raw = json.loads(json.dumps(VALID))
    assert parse_manifest(raw).name == "src"  # written before project_name: the source folder's name
    raw["project_name"] = "sgemm_demo"
    assert parse_manifest(raw).name == "sgemm_demo"


def _entry(raw: dict, section: str) -> dict:
    """The first entry of `section` in a manifest."""
    return {"manifest": lambda: raw, "compilers": lambda: raw["compilers"]["CXX"],
            "targets": lambda: raw["targets"][0], "benchmarks": lambda: raw["benchmarks"][0],
            "per_language": lambda: raw["targets"][0]["per_language"]["CXX"]}[section]()


def test_a_missing_required_field_is_named_with_what_to_do():
    required = [(s, f["name"]) for s, sec in field_table()["sections"].items()
                for f in sec["fields"] if f["required"] and f["name"] != "schema"]
    assert len(required) >= 10
    for section, name in required:
        raw = json.loads(json.dumps(VALID))
        del _entry(raw, section)[name]
        with pytest.raises(CompileIQError) as exc:
            parse_manifest(raw, "build/compileiq/manifest.json")
        message = str(exc.value)
        assert f"has no '{name}'" in message and "Re-run the CMake configure step" in message, message
        assert message.startswith("build/compileiq/manifest.json"), message


def test_a_field_of_the_wrong_type_is_named():
    raw = json.loads(json.dumps(VALID))
    raw["benchmarks"][0]["args"] = "--n 4"
    with pytest.raises(CompileIQError, match=r"benchmarks\[0\]: 'args' should be a list of strings"):
        parse_manifest(raw)
    raw = json.loads(json.dumps(VALID))
    raw["candidate_flags"] = "yes"
    with pytest.raises(CompileIQError, match="'candidate_flags' should be true or false"):
        parse_manifest(raw)


def test_optional_fields_default_to_empty_values():
    p = parse_manifest(json.loads(json.dumps(VALID)))
    (bench,) = p.benchmarks
    assert (bench.regex, bench.labels, bench.higher_is_better, bench.tolerance) == ("", (), False, None)
    assert p.targets[0].source_counts == {} and p.targets[0].cmake_target == "lib"
    assert p.compilers["CXX"].config_flags == "" and p.candidate_flags is False
