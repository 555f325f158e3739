"""cmake/manifest_fields.json, the one table of the manifest's fields: CompileIQ.cmake writes by it
and project.py reads by it, so a manifest configured by real cmake holds exactly its fields."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES

from compileiq_build import cmake_dir
from compileiq_build.errors import CompileIQError
from compileiq_build.project import manifest
from compileiq_build.project.manifest import TYPES, field_table, load_manifest, parse_manifest

SECTIONS = {"manifest", "compilers", "targets", "per_language", "benchmarks"}


def _of_type(value: Any, kind: str) -> bool:
    return {"string": lambda v: isinstance(v, str),
            "strings": lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
            "bool": lambda v: isinstance(v, bool),
            "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "map": lambda v: isinstance(v, dict) and all(isinstance(e, dict) for e in v.values()),
            "list": lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v)}[kind](value)


def _entries(section: str, entry: dict[str, Any], where: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(section, where, entry) for `entry` and every entry nested in its map and list fields."""
    yield section, where, entry
    for f in field_table()["sections"][section]["fields"]:
        value = entry.get(f["name"])
        if f["type"] == "map" and isinstance(value, dict):
            for key, sub in value.items():
                yield from _entries(f["section"], sub, f"{where}.{f['name']}.{key}")
        elif f["type"] == "list" and isinstance(value, list):
            for i, sub in enumerate(value):
                yield from _entries(f["section"], sub, f"{where}.{f['name']}[{i}]")


def _check(manifest: Path, seen: set[tuple[str, str]]) -> None:
    """Every entry of the manifest holds the table's fields that are always written, each field
    present is of its stated type, and no key is outside the table; `seen` gathers the fields found."""
    raw = json.loads(manifest.read_text())
    for section, where, entry in _entries("manifest", raw, manifest.name):
        fields = {f["name"]: f for f in field_table()["sections"][section]["fields"]}
        assert set(entry) <= set(fields), f"{where}: keys outside the table: {set(entry) - set(fields)}"
        for name, f in fields.items():
            if f["written"] == "always":
                assert name in entry, f"{where} lacks {name}, which the table says is always written"
            if name in entry:
                assert _of_type(entry[name], f["type"]), f"{where}.{name} is not {f['type']}: {entry[name]!r}"
                seen.add((section, name))
    load_manifest(manifest)  # and the reader takes it


def test_the_table_is_well_formed():
    table = field_table()
    assert table["schema"] == manifest.manifest_schema() == 1
    assert set(table["sections"]) == SECTIONS
    for name, section in table["sections"].items():
        names = [f["name"] for f in section["fields"]]
        assert len(names) == len(set(names)), f"{name}: a field listed twice"
        for f in section["fields"]:
            assert f["type"] in TYPES and f["written"] in ("always", "if_defined")
            assert isinstance(f["required"], bool) and f["cmake"] and f["origin"] and f["description"]
            assert not f["required"] or f["written"] == "always", f"{name}.{f['name']}: required, not always"
            assert (f["type"] in ("map", "list")) == ("section" in f)
            assert f.get("section", "manifest") in SECTIONS


def test_the_table_ships_with_the_cmake_module():
    assert (cmake_dir() / manifest.FIELD_TABLE).is_file()
    assert (cmake_dir() / "CompileIQConfig.cmake").is_file()


def test_a_configured_cxx_manifest_holds_the_tables_fields(cxx_project, configure):
    seen: set[tuple[str, str]] = set()
    for build, defines in (("release", ["-DCMAKE_BUILD_TYPE=Release"]),
                           ("tuning", ["-DCOMPILEIQ_CANDIDATE_FLAGS=ON"])):
        configure(cxx_project, cxx_project / build, *defines)
        _check(cxx_project / build / "compileiq" / "manifest.json", seen)
    assert ("compilers", "config_flags") in seen and ("per_language", "candidate_file") in seen
    assert ("per_language", "sources") in seen


def test_every_field_of_the_table_is_written(tmp_path, configure, nvcc):
    """A CUDA and C++ project, configured as users do and as the driver does: together they
    write every field of the table, the CUDA-only ones included."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "cuda_multi_project", src)
    seen: set[tuple[str, str]] = set()
    for build, defines in (("user", ["-DCMAKE_BUILD_TYPE=Release"]),
                           ("tuning", ["-DCOMPILEIQ_CANDIDATE_FLAGS=ON", "-DCOMPILEIQ_TUNING_ARCH=90"])):
        configure(src, tmp_path / build, f"-DCMAKE_CUDA_COMPILER={nvcc}", *defines)
        _check(tmp_path / build / "compileiq" / "manifest.json", seen)
    table = {(s, f["name"]) for s, sec in field_table()["sections"].items() for f in sec["fields"]}
    assert table - seen == set(), f"fields of the table no manifest holds: {sorted(table - seen)}"


def test_cmake_without_the_table_stops_with_what_to_do(tmp_path, configure):
    module = tmp_path / "module"
    shutil.copytree(cmake_dir(), module)
    (module / manifest.FIELD_TABLE).unlink()
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "cxx_project", src)
    proc = configure(src, tmp_path / "build", f"-DCompileIQ_ROOT={module}", check=False)
    assert proc.returncode != 0
    err = " ".join(proc.stderr.split())
    assert "manifest_fields.json is missing" in err and "Reinstall compileiq-build" in err


def test_the_reader_without_the_table_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "cmake_dir", lambda: tmp_path)
    field_table.cache_clear()
    try:
        with pytest.raises(CompileIQError, match=r"field table .*Reinstall compileiq-build"):
            parse_manifest({"schema": 1})
    finally:
        field_table.cache_clear()
