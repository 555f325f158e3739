"""Where the tool keeps its files in a build folder: everything under <build>/compileiq/.

The CMake module writes the manifest there; `tune` adds the results store, its lock, the
candidate trees, the flag probes and a prior that `learn --add` fitted on the folder's own
results.  Every command names these paths through this one place (tests/test_imports.py
checks that no other module spells them), and the build folder is made absolute here, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compileiq_build.errors import CompileIQError


@dataclass(frozen=True)
class Workspace:
    build_dir: Path  # absolute: resolved on construction, against the folder the command runs in

    def __post_init__(self) -> None:
        object.__setattr__(self, "build_dir", self.build_dir.resolve())

    @property
    def root(self) -> Path:
        return self.build_dir / "compileiq"

    @property
    def manifest(self) -> Path:
        """Written by cmake/CompileIQ.cmake when the folder is configured."""
        return self.root / "manifest.json"

    @property
    def config_manifests(self) -> list[Path]:
        """What a multi-config generator writes instead: a manifest per configuration."""
        return sorted(self.root.glob("manifest-*.json"))

    @property
    def store(self) -> Path:
        return self.root / "results.sqlite"

    @property
    def check_store(self) -> Path:
        """`check`'s measurements, apart from tune's: they decide nothing about what ships."""
        return self.root / "check.sqlite"

    def check_writable(self) -> None:
        """`tune` writes its store, lock and build trees under the build folder."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / ".write-probe"
            probe.write_text("", encoding="utf-8")
            probe.unlink()
        except OSError as exc:
            raise self.unwritable(exc) from None

    def unwritable(self, exc: OSError) -> CompileIQError:
        return CompileIQError(
            f"cannot write in {self.root}: {exc.strerror or exc}. tune keeps its results, its lock and "
            "its build trees in the build folder: make it writable, or configure another build "
            f"folder where you can write (cmake -S <source> -B <new build folder> -G Ninja "
            "-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)) and tune that one.")

    @property
    def lock(self) -> Path:
        """Held by a running `tune`: one at a time per build folder."""
        return self.root / "tune.lock"

    @property
    def work(self) -> Path:
        """The candidate build trees (worker slots)."""
        return self.root / "work"

    @property
    def resource_report(self) -> Path:
        """In a tuning tree: the compiler's resource report of what the tree compiled (trees.py)."""
        return self.root / "resource-report.json"

    @property
    def probe(self) -> Path:
        """Scratch projects that check which flags the compilers accept."""
        return self.root / "probe"

    @property
    def prior(self) -> Path:
        """The prior `learn --add` fitted on this folder's results; `tune` prefers it."""
        return self.root / "prior.txt"
