"""`learn`: fit the prior (prior.py) on the corpus of measured kernels and, optionally, on the
searches stored in the user's own build folders; write the model file `tune` loads.

The corpus is a folder of tables in the replay format, one per kernel (`benchmarks/corpus/tables`
in a checkout of this project).  A build folder's store adds each CUDA target it searched, as
`report --table` writes it; a target whose baseline code's features were not recorded is left
out, with a note (the prior needs them to know the kind of code).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from compileiq_build.errors import CompileIQError
from compileiq_build.project.workspace import Workspace
from compileiq_build.search.prior import OPTIONS, SHIPPED, KernelTable, fit, read_table, write

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus" / "tables"


@dataclass(frozen=True)
class Learned:
    path: Path
    kernels: int
    projects: list[str]
    rows: int
    seconds: float


def corpus_tables(folders: Sequence[Path]) -> list[KernelTable]:
    """Every table (`*.csv`) in these folders."""
    tables = []
    for folder in folders:
        paths = sorted(folder.glob("*.csv"))
        if not paths:
            raise CompileIQError(f"no corpus tables (*.csv) in {folder}: name the corpus with --corpus DIR")
        for path in paths:
            try:
                tables.append(read_table(path))
            except (OSError, ValueError, KeyError) as exc:
                raise CompileIQError(f"{path} is not a table of the replay format: {exc}") from None
    return tables


def store_tables(build_dir: Path, note: Callable[[str], None]) -> list[KernelTable]:
    """The CUDA targets searched in a build folder's store, as tables (their project: the folder)."""
    from compileiq_build.results.report import searched_targets, table

    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in searched_targets(build_dir):
            path = Path(tmp) / f"{target.replace(':', '_')}.csv"
            table(build_dir, path, target)
            kernel = read_table(path, project=f"store:{build_dir.resolve()}")
            if not any(name in OPTIONS for name in kernel.configs[0]):
                continue  # not a CUDA target: the prior knows no option of its space
            if not kernel.features[kernel.baseline]:
                note(f"{build_dir}: {target} left out: its baseline code's features were not recorded")
                continue
            found.append(kernel)
    return found


def learn(corpus: Sequence[Path], add: Sequence[Path], output: Path | None,
          note: Callable[[str], None] = print) -> Learned:
    """Fit and write the prior; `output` defaults to the shipped file without `add`, else to the
    first added build folder's compileiq/prior.txt, which `tune` of that folder then loads."""
    started = time.monotonic()
    tables = corpus_tables(corpus or [CORPUS])
    for build_dir in add:
        tables += store_tables(build_dir, note)
    if output is None:
        output = Workspace(add[0]).prior if add else SHIPPED
    note(f"fitting the prior on {len(tables)} kernels ({sum(len(t.times) for t in tables)} configurations)")
    meta = write(fit(tables), tables, output)
    return Learned(output, len(tables), list(meta["projects"]), int(meta["rows"]),  # type: ignore[call-overload]
                   time.monotonic() - started)
