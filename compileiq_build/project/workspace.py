"""Where the tool keeps its files in a build folder: everything under <build>/compileiq/.

The CMake module writes the manifest there; `tune` adds the results store, its lock, the
candidate trees, the flag probes and a prior that `learn --add` fitted on the folder's own
results.  Every command names these paths through this one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

FOLDER = Path("compileiq")
MANIFEST = FOLDER / "manifest.json"  # written by cmake/CompileIQ.cmake
STORE = FOLDER / "results.sqlite"


@dataclass(frozen=True)
class Workspace:
    build_dir: Path

    @property
    def root(self) -> Path:
        return self.build_dir / FOLDER

    @property
    def manifest(self) -> Path:
        return self.build_dir / MANIFEST

    @property
    def store(self) -> Path:
        return self.build_dir / STORE

    @property
    def lock(self) -> Path:
        """Held by a running `tune`: one at a time per build folder."""
        return self.root / "tune.lock"

    @property
    def work(self) -> Path:
        """The candidate build trees (worker slots)."""
        return self.root / "work"

    @property
    def probe(self) -> Path:
        """Scratch projects that check which flags the compilers accept."""
        return self.root / "probe"

    @property
    def prior(self) -> Path:
        """The prior `learn --add` fitted on this folder's results; `tune` prefers it."""
        return self.root / "prior.txt"
