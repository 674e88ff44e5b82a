"""The model version: a hash of every file that decides a simulated result.

``MODEL_VERSION`` is part of every stored result's key (sweep cases, validation
predictions, figure data), so a result computed by other code is never reused. It is
derived, not listed: the modules that decide a result are the run layer's roots
(:data:`ROOTS`) and everything they import from memwall, transitively, imports inside
functions included; the packages holding them (whose ``__init__`` runs on import); and
the compiled extensions among them (``_csim``, ``_textparse``), whose bytes are hashed
as they are installed. A module nothing in the run layer imports (the CLI, figures,
the report) can change without moving the version.

Computed when this module is imported, from the files of the installed copy beside it:
the files are read and parsed with :mod:`ast`, never imported. This module is a leaf;
import it directly (``from .model_version import MODEL_VERSION``), not through the
package root. :func:`module_imports` is the one definition of "what a module imports"
that ``tests/test_imports.py`` also walks.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Iterator
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

__all__ = ["MODEL_SOURCE_VERSION", "MODEL_VERSION", "ROOTS", "model_files", "model_version", "module_imports", "module_path",
           "package_modules"]

PACKAGE = "memwall"

# The run layer: the modules that turn a case into a result. A package stands for every
# module in it; a root whose file does not exist is skipped. Today: the run package (case
# -> step -> plan -> replay -> time -> result, and the results row); a module outside it
# that shapes a result (a case's defaults, a key) must be reached from it or listed here.
ROOTS: tuple[str, ...] = ("memwall.simulation",)


def module_path(name: str, top: Path) -> Path | None:
    """The file of module *name* (``memwall.a.b``) in the package folder *top*: its
    ``.py``, its package's ``__init__.py`` or, for a compiled module, its extension
    (``_csim.cpython-311-x86_64-linux-gnu.so``); None when there is none."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = top.joinpath(*parts[1:])
    candidates = [base / "__init__.py"]
    if len(parts) > 1:
        candidates = [base.with_suffix(".py"), *candidates, *(base.parent / (base.name + s) for s in EXTENSION_SUFFIXES)]
    return next((path for path in candidates if path.is_file()), None)


def package_modules(name: str, top: Path) -> dict[str, Path]:
    """Module name -> ``.py`` file for package *name* (``memwall``, ``memwall.simulation``) and
    every module and subpackage in it, under the package folder *top*."""
    folder = top.joinpath(*name.split(".")[1:])
    out = {}
    for path in sorted(folder.rglob("*.py")):
        parts = path.relative_to(top).with_suffix("").parts
        out[".".join((PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


# The fields that hold statements: an import is a statement, so only these are walked.
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _import_nodes(statements: Iterable[ast.AST]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement among *statements* and inside them (functions, classes,
    branches), except in the body of an ``if TYPE_CHECKING:`` block (its ``else`` runs)."""
    for node in statements:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        skip_body = isinstance(node, ast.If) and _is_type_checking(node.test)
        for block in _BLOCKS:
            inner = getattr(node, block, None)
            if isinstance(inner, list) and not (skip_body and block == "body"):
                yield from _import_nodes(inner)


def module_imports(name: str, source: str | bytes, top: Path, *, is_package: bool = False) -> dict[str, int]:
    """The memwall modules that module *name* imports (statically), given its *source*,
    each with the line of its first import.

    ``import memwall.a.b`` imports ``memwall.a.b``; ``from M import x`` imports ``M`` and,
    when ``M.x`` is a module under *top*, ``M.x`` too. Relative imports resolve against
    *name*'s package (*name* itself when *is_package*, an ``__init__.py``): so
    ``from .. import x`` in ``memwall.cli.machines`` imports ``memwall``, the package root."""
    package = name if is_package else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in _import_nodes(ast.parse(source).body):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names = [module, *(f"{module}.{alias.name}" for alias in node.names
                               if module_path(f"{module}.{alias.name}", top) is not None)]
        for m in names:
            if m == PACKAGE or m.startswith(PACKAGE + "."):
                found.setdefault(m, node.lineno)
    return found


def _parents(name: str) -> Iterator[str]:
    parts = name.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def model_files(top: Path, roots: Iterable[str] = ROOTS) -> dict[str, Path]:
    """Module name -> file for every module that decides a result: the *roots* that
    exist under the package folder *top* (a package: each of its modules), what they
    import, transitively, and the packages holding each (their ``__init__`` runs when a
    module in them is imported)."""
    todo = []
    for root in roots:
        path = module_path(root, top)
        todo.extend(package_modules(root, top) if path is not None and path.name == "__init__.py" else [root])
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        path = None if name in seen else module_path(name, top)
        if path is None:
            continue
        seen[name] = path
        todo.extend(_parents(name))
        if path.suffix == ".py":
            todo.extend(module_imports(name, path.read_bytes(), top, is_package=path.name == "__init__.py"))
    return seen


def _declared_version(top: Path) -> str:
    """``__version__`` as ``__init__.py`` assigns it, read without importing the package."""
    for node in ast.parse((top / "__init__.py").read_bytes()).body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
                and isinstance(node.value, ast.Constant)):
            return str(node.value.value)
    raise RuntimeError(f"{top / '__init__.py'}: no literal __version__ = '...'")


def model_version(top: Path, roots: Iterable[str] = ROOTS, *, sources_only: bool = False) -> str:
    """``__version__+hash``: the hash over the relative path and bytes of each of
    :func:`model_files`, in name order; ``sources_only``: of its Python sources alone, so
    that every build of the same commit agrees (a compiled extension's bytes depend on the
    compiler and the build folder)."""
    return _versions(top, roots)[1 if sources_only else 0]


def _versions(top: Path, roots: Iterable[str] = ROOTS) -> tuple[str, str]:
    """(every model file, the Python sources alone), from one walk of the imports."""
    whole, sources = hashlib.sha256(), hashlib.sha256()
    for _, path in sorted(model_files(top, roots).items()):
        part = path.relative_to(top).as_posix().encode() + b"\0" + path.read_bytes()
        whole.update(part)
        if path.suffix == ".py":
            sources.update(part)
    declared = _declared_version(top)
    return f"{declared}+{whole.hexdigest()[:10]}", f"{declared}+{sources.hexdigest()[:10]}"


# What a file committed beside the code (era_data/intervals.toml) names is the second: the
# same on every build of a commit. The engine's counts are exact (checked against the
# reference model), so a change that moves a prediction moves a Python source too.
MODEL_VERSION, MODEL_SOURCE_VERSION = _versions(Path(__file__).parent)
