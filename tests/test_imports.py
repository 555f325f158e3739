"""The package's modules import each other without a cycle (docs/architecture.md says so).

The graph is read from the source with `ast`: every `import` and `from ... import` of a
compileiq_build module, at the top of a module or inside a function, and those under
`if TYPE_CHECKING:` too.  A cycle through a lazy import is still a cycle of the layering.
`python tests/test_imports.py` prints the levels and the Mermaid diagram of docs/architecture.md.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "compileiq_build"


def _name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package: its __init__.py)."""
    paths = {_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*parent, *([node.module] if node.module else [])])
                wanted = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for module in wanted:
                while module and module not in paths:  # compileiq_build.x.Name -> compileiq_build.x
                    module = module.rpartition(".")[0]
                if module and module != name:
                    found.add(module)
        graph[name] = found
    return graph


def reduced(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph less every edge that a longer path implies (what the diagram draws)."""
    def below(module: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph[module])
        while todo:
            if (m := todo.pop()) not in seen:
                seen.add(m)
                todo += graph[m]
        return seen

    return {m: {d for d in deps if not any(d in below(o) for o in deps - {d})} for m, deps in graph.items()}


def _label(m: str) -> str:
    return m.removeprefix("compileiq_build.") if m != "compileiq_build" else "compileiq_build/__init__"


def levels(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules by level, highest first: a module is one level above its highest import."""
    level: dict[str, int] = {}
    for m in graphlib.TopologicalSorter(graph).static_order():
        level[m] = 1 + max((level[d] for d in graph[m]), default=-1)
    return [sorted(_label(m) for m in level if level[m] == n) for n in range(max(level.values()), -1, -1)]


def mermaid(graph: dict[str, set[str]]) -> str:
    """The `reduced` graph in Mermaid, `A --> B` where A imports B."""
    def node(m: str) -> str:
        return _label(m).replace(".", "_").replace("/", "_")

    lines = ["flowchart TD"]
    lines += [f'  {node(m)}["{_label(m)}"]' for m in sorted(graph) if node(m) != _label(m)]
    for module, deps in sorted(reduced(graph).items()):
        lines += [f"  {node(module)} --> {node(d)}" for d in sorted(deps)]
    return "\n".join(lines)


def test_the_graph_holds_every_module_and_its_imports():
    graph = import_graph()
    fit = "compileiq_build.search.strategies.model.fit"
    assert {"compileiq_build", "compileiq_build.stages.tune", fit} <= set(graph)
    assert "compileiq_build.decide.racing" in graph["compileiq_build.evaluate.pairing"]
    assert "compileiq_build.search.strategies.base" in graph[fit]
    assert "compileiq_build.search.prior" in graph[fit]  # under TYPE_CHECKING


# The package's layers, lowest first: a module imports only from its own layer and those below.
# The top-level modules other than the CLI's sit in the base layer (they import nothing above it).
LAYERS = (
    ("compileiq_build", "errors", "notes", "options"),
    ("machine",), ("project",), ("store",), ("build",), ("run",), ("decide",), ("evaluate",),
    ("results",), ("search",), ("stages",),
    ("cli", "demo", "doctor", "__main__"),
)


def layer_of(module: str) -> int:
    part = _label(module).removesuffix("/__init__").split(".")[0]
    return next(n for n, layer in enumerate(LAYERS) if part in layer)


def test_the_subpackages_are_layers_no_import_runs_back_up():
    graph = import_graph()
    upward = sorted(f"{_label(m)} -> {_label(d)}" for m, deps in graph.items() for d in deps
                    if layer_of(d) > layer_of(m))
    assert not upward, f"imports against the layers {LAYERS}: {upward}"


def test_the_package_top_level_holds_at_most_twelve_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top
    placed = {name for layer in LAYERS for name in layer} | {"__init__"}
    assert {p.stem for p in PACKAGE.glob("*.py")} <= placed, "a top-level module the LAYERS do not place"


def test_a_cycle_through_relative_and_lazy_imports_is_found(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")
    (package / "c.py").write_text("from . import a\n")
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg", "pkg.a"}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter(graph).prepare()


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None
    assert set(order) == set(graph)


def test_no_module_imports_another_modules_private_name():
    private = []
    for path in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "benchmarks").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("compileiq_build"):
                private += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert not private, private


def test_only_the_workspace_module_spells_paths_under_the_build_folder():
    # A "compileiq" path part or a "compileiq/..." path; messages and help that name the folder
    # for the user ("<build>/compileiq/") are not paths the code opens.
    spelt = [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}"
             for path in PACKAGE.rglob("*.py") if path != PACKAGE / "project" / "workspace.py"
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and (node.value == "compileiq" or node.value.startswith("compileiq/"))]
    assert not spelt, f"paths under the build folder go through project/workspace.py: {spelt}"


if __name__ == "__main__":
    print("\n".join("  ".join(line) for line in levels(import_graph())))
    print(mermaid(import_graph()))
