"""The package's layers hold: nothing below imports anything above it (issue 27).

The package reads as the data flow, manifest -> engine -> builders -> artifacts ->
push and release, over libraries that know nothing of it (oci, the HTTP client, the
files and processes of a build). Every `import` in src/shipyard, at any depth of a
module (a function's lazy import counts too), is checked against `LAYERS`: a module
may import its own top-level package and the layers below its own, never a layer
above nor another package of its own layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "shipyard"

# Lowest first. A name is a top-level module or package of shipyard ("__init__" is
# the package's own __init__.py).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_fs", "_toml", "_json", "_units", "_environ"),
    ("__init__",),  # the version, and the errors re-exported
    ("process", "git"),
    ("files", "dist", "stamp", "artifacts", "_http"),
    ("oci",),
    ("workspace",),
    ("manifest",),
    ("entrypoints",),
    ("init",),
    ("engine",),
    ("builders", "stages"),
    ("release",),
    ("cli", "nox"),
    ("__main__", "_docs"),  # _docs: the site's generated references, from the CLI up
)
RANK = {name: index for index, names in enumerate(LAYERS) for name in names}


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """(line, imported module) of every absolute import of shipyard in the file; a
    relative import is made absolute."""
    module = _module(path, src)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            if base == "shipyard":  # `from shipyard import x`: each x may be a module
                found += [(node.lineno, f"shipyard.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, base))
    return [(line, name) for line, name in found if name.split(".")[0] == "shipyard"]


def _known(name: str, package: Path = PACKAGE) -> bool:
    return (package / name).is_dir() or (package / f"{name}.py").is_file()


def violations(src: Path = SRC) -> list[str]:
    """Every import that goes up or sideways, as `file:line: a imports b`."""
    package = src / "shipyard"
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        mine = _top(_module(path, src))
        for line, name in _imports(path, src):
            theirs = _top(name)
            if theirs == mine or not _known(theirs, package):
                continue  # its own package; `from shipyard import __version__`
            if RANK[theirs] >= RANK[mine]:
                where = path.relative_to(src.parent)
                found.append(f"{where}:{line}: {mine} (layer {RANK[mine]}) imports {name}")
    return found


def test_every_top_level_module_has_a_layer() -> None:
    names = {p.stem if p.suffix == ".py" else p.name for p in PACKAGE.iterdir()}
    names = {n for n in names if not n.startswith(".") and n != "__pycache__"} - {"py"}
    assert sorted(n for n in names if n not in RANK and _known(n)) == []


def test_nothing_below_imports_anything_above() -> None:
    assert violations() == []


def test_the_check_sees_upward_and_sideways_imports(tmp_path: Path) -> None:
    """The check itself, on a made-up tree: a lazy import of the engine inside oci, a
    relative import across packages, and builders importing stages are caught; an
    import downwards is not."""
    src = tmp_path / "src"
    for name in ("oci", "engine", "builders", "stages"):
        (src / "shipyard" / name).mkdir(parents=True)
        (src / "shipyard" / name / "__init__.py").write_text("")
    (src / "shipyard" / "oci" / "keep.py").write_text(
        "def f():\n    from shipyard.engine.keys import ActionKey\n"
    )
    (src / "shipyard" / "oci" / "rel.py").write_text("from ..engine import plan\n")
    (src / "shipyard" / "builders" / "x.py").write_text(
        "from shipyard.stages import run\nfrom shipyard.oci import keep\n"
    )
    assert violations(src) == [
        "src/shipyard/builders/x.py:1: builders (layer 10) imports shipyard.stages",
        "src/shipyard/oci/keep.py:2: oci (layer 4) imports shipyard.engine.keys",
        "src/shipyard/oci/rel.py:1: oci (layer 4) imports shipyard.engine",
    ]
