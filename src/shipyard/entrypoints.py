"""Is `module.path:attr` there? Answered from files, never by importing them.

A zipapp or image runs `from module.path import attr` when it starts; a wrong name
inside a package (`pkg._clii:main` for `pkg._cli:main`) used to pass every check and
die with a traceback at run time. The module is looked for in the folders it will be
imported from (a platform's resolved site, or the binary's own source), and the
attribute among the names the module's source binds at top level (functions, classes,
assignments, imports, also inside top-level `if`/`try`/`with` blocks). Code is parsed,
not run, so a site resolved for another platform is checked as safely as this one's; a
compiled extension module, a module-level `__getattr__` or a star import can bind
anything, so the attribute of such a module is taken on trust.
"""

from __future__ import annotations

import ast
import difflib
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shipyard.manifest import Manifest

__all__ = [
    "check_own_entrypoints",
    "entrypoint_problem",
    "own_entrypoint_problem",
    "top_level_names",
]

_EXTENSIONS = (".so", ".pyd")
_PARSING = threading.Lock()


def _close(word: str, choices: Iterable[str]) -> str:
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f" (did you mean {found[0]}?)" if found else ""


def _modules(folder: Path) -> set[str]:
    """The importable names in `folder`: packages and modules, extensions included."""
    names: set[str] = set()
    try:
        entries = list(folder.iterdir())
    except OSError:
        return names
    for entry in entries:
        if entry.is_dir() and entry.name.isidentifier():
            names.add(entry.name)
        elif entry.suffix == ".py" or entry.name.endswith(_EXTENSIONS):
            names.add(entry.name.partition(".")[0])
    return names


def _bound(body: Sequence[ast.stmt], names: set[str]) -> bool:
    """Add the names `body` binds at its level to `names`; True when it may bind any
    name (a star import, or a module `__getattr__`)."""
    anything = False
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            anything |= node.name == "__getattr__"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    anything = True
                else:
                    names.add(alias.asname or alias.name.partition(".")[0])
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for part in ("body", "orelse", "finalbody"):
                anything |= _bound(getattr(node, part, []), names)
            for handler in getattr(node, "handlers", []):
                anything |= _bound(handler.body, names)
            if isinstance(node, ast.For):
                names.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
    return anything


def top_level_names(source: str) -> tuple[set[str], bool]:
    """The names a module's source binds at top level, and whether it may bind any."""
    names: set[str] = set()
    with _PARSING:  # CPython 3.11's AST constructor is not safe across threads
        tree = ast.parse(source)
    anything = _bound(tree.body, names)
    return names, anything


def entrypoint_problem(entrypoint: str, roots: Sequence[Path], where: str) -> str | None:
    """None when `module:attr` is found in one of `roots` (import folders, in order);
    else what is missing, with a did-you-mean. `where` names the roots for people
    ("meshctl's wheel or its dependencies")."""
    module, _, attribute = entrypoint.partition(":")
    parts = module.split(".")
    for root in roots:
        if (root / parts[0]).is_dir() or parts[0] in _modules(root):
            break
    else:
        first = _close(parts[0], (n for r in roots for n in _modules(r)))
        return f"no module {parts[0]} in {where}{first}"
    folder = root
    for index, part in enumerate(parts):
        so_far = ".".join(parts[: index + 1])
        last = index == len(parts) - 1
        if (folder / part).is_dir() and not last:
            folder = folder / part
            continue
        if last:
            break
        return f"no module {so_far} in {where}{_close(part, _modules(folder))}"
    name = parts[-1]
    package = folder / name
    candidates = [package / "__init__.py", folder / f"{name}.py"]
    file = next((c for c in candidates if c.is_file()), None)
    if file is None:
        if any(p.name.startswith(f"{name}.") and p.name.endswith(_EXTENSIONS)
               for p in folder.glob(f"{name}.*")):  # fmt: skip
            return None  # a compiled module: its names cannot be read from a file
        if package.is_dir():
            file = None  # a namespace package: it binds no attribute of its own
        else:
            return f"no module {module} in {where}{_close(name, _modules(folder))}"
    if not attribute:
        return None
    head = attribute.partition(".")[0]
    if file is None:
        names: set[str] = set()
        anything = False
    else:
        try:
            names, anything = top_level_names(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, SystemError):
            return None  # not ours to judge: Python says what is wrong when it runs
    if anything or head in names or (package.is_dir() and head in _modules(package)):
        return None  # bound, or a submodule that `from module import head` loads
    return f"module {module} has no {head}{_close(head, names)}"


def _package_dirs(source: Path, top: str) -> list[Path]:
    """The folders setuptools' `[tool.setuptools.package-dir]` puts `top` (or every
    package, through the "" key) in: `{"pkg": "lib/pkg"}` gives lib/, `{"": "code"}`
    code/. A mapping to a folder named otherwise is left to the build."""
    from shipyard import _toml

    try:
        data = _toml.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    tool = data.get("tool")
    setuptools = tool.get("setuptools") if isinstance(tool, dict) else None
    mapping = setuptools.get("package-dir") if isinstance(setuptools, dict) else None
    if not isinstance(mapping, dict):
        return []
    found = []
    own = mapping.get(top)
    if isinstance(own, str) and Path(own).name == top:
        found.append((source / own).parent)
    every = mapping.get("")
    if isinstance(every, str):
        found.append(source / every)
    return found


def own_entrypoint_problem(source: Path, entrypoint: str, where: str) -> str | None:
    """`entrypoint_problem` for a module of the project at `source` (flat, src/ or
    setuptools package-dir layout); None when the module is not the project's own
    (a dependency's: the build checks it where it runs) or when it is there."""
    top = entrypoint.partition(":")[0].split(".")[0]
    folders = [*_package_dirs(source, top), source / "src", source]
    roots = [r for r in folders if top in _modules(r)]
    return entrypoint_problem(entrypoint, roots, where) if roots else None


def check_own_entrypoints(manifest: Manifest) -> None:
    """Raise a ManifestError (exit 2, at each `entrypoint` value) for every binary whose
    entry point names a module of its own source (flat or src/ layout) that is not
    there. An entry point into a dependency is left to the build, which checks it in
    each platform's resolved site."""
    from shipyard.errors import ManifestError, Problem
    from shipyard.manifest import locate

    found: list[tuple[str, str]] = []
    for name, binary in manifest.binaries.items():
        if not binary.entrypoint or ":" not in binary.entrypoint:
            continue
        source = binary.source if binary.source.is_absolute() else manifest.root / binary.source
        problem = own_entrypoint_problem(source, binary.entrypoint, f"{name}'s source")
        if problem:
            found.append((name, problem))
    if not found:
        return
    places = locate(manifest, *(("binaries", name, "entrypoint") for name, _ in found))
    problems = []
    for (name, problem), at in zip(found, places, strict=True):
        problems.append(
            Problem(
                at,
                f"binaries.{name}.entrypoint",
                f"{manifest.binaries[name].entrypoint}: {problem}",
                "fix the entrypoint (module.path:function)",
            )
        )
    raise ManifestError(problems)
