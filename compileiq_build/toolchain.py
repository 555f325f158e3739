"""Stage 5: render the commit-ready CMake toolchain file from the winners."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from compileiq_build import __version__
from compileiq_build.errors import CompileIQError
from compileiq_build.project import Compiler, c_identifier
from compileiq_build.selection import NoWinner, Winner

DEFAULT_NAME = "compileiq-toolchain.cmake"


@dataclass(frozen=True)
class Provenance:
    date: str  # YYYY-MM-DD
    machine: str  # GPU name(s) or CPU model
    driver: str
    compilers: tuple[str, ...]  # "CUDA NVIDIA 13.0.88"
    strategy: str


def provenance(env: Mapping[str, Any], compilers: Mapping[str, Compiler], strategy: str,
               date: str) -> Provenance:
    """From a stored environment record (environment.describe) and the project's compilers."""
    gpus = env.get("gpus") or []
    if gpus:
        machine = "; ".join(sorted({f"{g['name']} (sm_{g['compute_capability'].replace('.', '')})"
                                    for g in gpus}))
        driver = ", ".join(sorted({g["driver"] for g in gpus}))
    else:
        machine, driver = f"CPU {env.get('cpu', 'unknown')} (no GPU)", "none"
    names = tuple(f"{lang} {c.id} {c.version}" for lang, c in sorted(compilers.items()))
    return Provenance(date, machine, driver, names, strategy)


def bracket(text: str) -> str:
    """CMake bracket argument: nothing inside it is CMake code, whatever the text."""
    level = 1
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def comment(text: object) -> str:
    """Text safe inside a '#' comment line: no line breaks or control characters."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(text))


def variable_name(target_id: str, language: str, arch_key: str) -> str:
    """As CompileIQ.cmake spells it; anything but [A-Za-z0-9_] becomes '_' (MAKE_C_IDENTIFIER)."""
    name = f"COMPILEIQ_FLAGS_{target_id}_{language}_{arch_key}"
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("compileiq_build", "templates"),
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
    lstrip_blocks=True, autoescape=False,
)
_ENV.filters["bracket"] = bracket
_ENV.filters["comment"] = comment


# A CMake list splits at ';', treats '[' ']' as grouping and a '\' before ';' as an
# escape, whatever the quoting: such a flag could not be read back as one element.
# No compiler flag needs them.
_UNLISTABLE = re.compile(r"[;\[\]\x00\r\n]|\\$")


def render(winners: Sequence[Winner], losers: Sequence[NoWinner], provenance: Provenance) -> str:
    entries = []
    for w in sorted(winners, key=lambda w: (w.target, sorted(w.arch_keys.items()))):
        for flag in (f for flags in w.flags.values() for f in flags):
            if _UNLISTABLE.search(flag):
                raise CompileIQError(f"flag {flag!r} of {w.target} holds text (; [ ], a line break or "
                                     "a final backslash) that a CMake list cannot hold; it is not written.")
        for lang in sorted(w.flags):
            entries.append({
                "target": w.target, "language": lang, "arch": w.arch_keys[lang],
                "variable": variable_name(c_identifier(w.target), lang, w.arch_keys[lang]),
                "flags": w.flags[lang],
            })
    return _ENV.get_template("toolchain.cmake.j2").render(
        version=__version__, provenance=provenance, entries=entries,
        winners=sorted(winners, key=lambda w: w.target),
        losers=sorted(losers, key=lambda n: n.target))


def write(path: Path, text: str) -> None:
    """Write atomically, so a crash never leaves half a toolchain file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise CompileIQError(
            f"cannot write the toolchain file {path}: {exc.strerror or exc}. "
            "Choose a writable place with --output PATH.") from None
