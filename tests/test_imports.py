"""The project's import graph has no circle: read from the source (ast), every import counted, those
inside functions and under TYPE_CHECKING too, since each still ties the two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kvnode", "loadtest", "profiling", "tests")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
    }


def imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that ``path`` imports: ``from a.b import c`` names a.b.c if that is a module,
    else a.b."""
    found: set[str] = set()
    for statement in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(statement, ast.Import):
            found.update(alias.name for alias in statement.names)
        elif isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
            for alias in statement.names:
                submodule = f"{statement.module}.{alias.name}"
                found.add(submodule if submodule in modules else statement.module)
    return {name for name in found if name in modules}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or of one that imports itself
    (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                lowest[module] = min(lowest[module], lowest[imported])
            elif imported in stack:
                lowest[module] = min(lowest[module], index[imported])
        if lowest[module] == index[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1 or module in graph[module]:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_among_the_projects_modules() -> None:
    modules = project_modules()
    graph = {name: imports(path, modules) for name, path in modules.items()}
    assert len(graph) > 50, "the project's modules were not found"
    assert circles(graph) == []


def test_the_server_never_imports_the_tooling_below_it() -> None:
    """Only ``python -m kvnode`` (kvnode.__main__) starts from the tooling: it calls kvnode.ops.cli, or
    kvnode.check.cli for ``check``."""
    modules = project_modules()
    tooling = {name for name in modules if name.startswith(("kvnode.ops", "kvnode.check"))} | {
        "kvnode.__main__"
    }
    server = [name for name in modules if name.startswith("kvnode") and name not in tooling]
    reaching = {name: sorted(imports(modules[name], modules) & tooling) for name in server}
    assert {name: found for name, found in reaching.items() if found} == {}


def test_a_circle_is_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"a"}, "b": set()}) == [["a"]]


# kvnode's packages from the bottom up: a module may import from its own layer's package and from the
# layers below, never from a layer above, nor from another package of its own layer (they sit side by side).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "kvnode.config",
        "kvnode.figures",
        "kvnode.metrics",
        "kvnode.memory",
        "kvnode.scheduling",
        "kvnode.hot_path",
    ),
    ("kvnode.loop_lag",),
    ("kvnode.topology",),
    ("kvnode.clocks",),
    ("kvnode.storage",),
    ("kvnode.replica",),
    ("kvnode.healing", "kvnode.coordinator", "kvnode.access", "kvnode.paxos"),
    ("kvnode.cluster",),
    ("kvnode.node", "kvnode.client"),
    ("kvnode.ops",),
    ("kvnode.check",),
    ("kvnode.__main__",),
)


def package_of(module: str) -> str:
    """The layered package (or top-level module) a kvnode module belongs to: kvnode.replica.peer ->
    kvnode.replica."""
    return ".".join(module.split(".")[:2])


def kvnode_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {
        name: {found for found in imports(path, modules) if found.startswith("kvnode")}
        for name, path in modules.items()
        if name.startswith("kvnode.")
    }


def test_no_circle_among_kvnodes_packages() -> None:
    packages: dict[str, set[str]] = {}
    for module, imported in kvnode_graph().items():
        edges = packages.setdefault(package_of(module), set())
        edges.update(package_of(name) for name in imported if package_of(name) != package_of(module))
    for imported in list(packages.values()):
        for name in imported:
            packages.setdefault(name, set())
    assert circles(packages) == []


def test_every_kvnode_package_has_a_layer_and_imports_only_below_it() -> None:
    layer = {package: index for index, packages in enumerate(LAYERS) for package in packages}
    graph = kvnode_graph()
    assert {package_of(module) for module in graph} <= set(layer), "a package has no layer"
    upward = sorted(
        f"{module} -> {name}"
        for module, imported in graph.items()
        for name in imported
        if package_of(name) != package_of(module) and layer[package_of(name)] >= layer[package_of(module)]
    )
    assert upward == []


def test_every_folder_of_modules_is_a_package_an_install_carries() -> None:
    """setuptools' find_packages leaves out a folder without __init__.py: an install would lack it."""
    folders = {path.parent for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    assert (
        sorted(str(folder.relative_to(ROOT)) for folder in folders if not (folder / "__init__.py").exists())
        == []
    )
