"""No import circle in memwall: every import of every module, inside functions too.

The graph is static: each module's memwall imports as :func:`memwall.model_version.module_imports`
reads them from its source (``if TYPE_CHECKING:`` blocks left out). ``from memwall import X``
and ``from .. import X`` (to the package root) import ``memwall/__init__.py``; ``from . import
x`` inside a package imports that package's ``__init__`` and, when ``x`` is a submodule, ``x``.
A circle is reported as a path of modules, each step with the file and line of its import."""

from __future__ import annotations

from pathlib import Path

import pytest

import memwall
from memwall.model_version import module_imports, package_modules

TOP = Path(memwall.__file__).parent


def import_graph(top: Path) -> tuple[dict[str, dict[str, int]], dict[str, Path]]:
    """Module -> {memwall module it imports: line}, over the ``.py`` modules under *top*
    (compiled extensions import nothing of memwall and are left out)."""
    files = package_modules("memwall", top)
    graph = {name: {m: line for m, line in module_imports(name, path.read_bytes(), top,
                                                          is_package=path.name == "__init__.py").items()
                    if m in files}
             for name, path in files.items()}
    return graph, files


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a circle
    (Tarjan's algorithm, iterative), each sorted; a module importing itself is a group."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1 or v in graph[v]:
                    groups.append(sorted(group))
    return groups


def circle(graph: dict[str, dict[str, int]], group: list[str]) -> list[str]:
    """One shortest circle through the first module of *group*, as a path back to it."""
    start = group[0]
    inside = set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    return [*paths[v], start]
                if w in inside and w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{group} is not a circle")


def describe(graph: dict[str, dict[str, int]], files: dict[str, Path], top: Path, path: list[str]) -> str:
    steps = [f"  {a} -> {b}  ({files[a].relative_to(top.parent).as_posix()}:{graph[a][b]})"
             for a, b in zip(path, path[1:], strict=False)]
    return " -> ".join(path) + "\n" + "\n".join(steps)


def test_no_import_circle() -> None:
    graph, files = import_graph(TOP)
    groups = strongly_connected(graph)
    report = []
    for group in groups:
        report.append(describe(graph, files, TOP, circle(graph, group)))
        if len(group) > 2:
            report.append(f"  (all of {', '.join(group)} import each other around circles)")
    assert not groups, f"{len(groups)} import circle(s) in src/memwall:\n" + "\n".join(report)


# ---- the walker's rules, on a small package ---------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    top = tmp_path / "memwall"
    for rel, text in {"__init__.py": "", **files}.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text)
    return top


def test_imports_inside_functions_count_and_type_checking_ones_do_not(tmp_path: Path) -> None:
    top = _package(tmp_path, {"a.py": "", "b.py": "", "c.py": "", "d.py": "", "m.py": (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .a import A\nelse:\n    from .d import D\n"
        "def f():\n    from .b import B\n    return B\n"
        "class K:\n    def g(self):\n        try:\n            import memwall.c\n        finally:\n            pass\n")})
    graph, _ = import_graph(top)
    assert graph["memwall.m"] == {"memwall.b": 7, "memwall.c": 12, "memwall.d": 5}


def test_the_package_root_and_from_dot_imports(tmp_path: Path) -> None:
    top = _package(tmp_path, {
        "x.py": "", "sub/__init__.py": "from . import y\nfrom .y import Y\n", "sub/y.py": "",
        "sub/z.py": "from .. import x, VERSION\nfrom memwall import thing\nfrom . import helper\n"})
    graph, _ = import_graph(top)
    assert set(graph["memwall.sub"]) == {"memwall.sub", "memwall.sub.y"}  # an __init__'s `.` is itself
    assert set(graph["memwall.sub.z"]) == {"memwall", "memwall.x", "memwall.sub"}


@pytest.mark.parametrize("edges, found", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"a"}}, [["a"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_circles_are_found_and_shown_as_paths(edges: dict[str, set[str]], found: list[list[str]]) -> None:
    graph = {v: dict.fromkeys(ws, 1) for v, ws in edges.items()}
    assert strongly_connected(graph) == found
    for group in found:
        path = circle(graph, group)
        assert path[0] == path[-1] and all(b in graph[a] for a, b in zip(path, path[1:], strict=False))
