"""YAML to plain values plus the position of every key and value.

PyYAML's composer gives nodes with marks; constructing from nodes ourselves lets
us keep those marks, reject duplicate keys (PyYAML silently keeps the last one)
and bound the work an alias bomb can cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from shipyard.errors import Location, ManifestError, Problem

__all__ = ["Node", "Positions", "load_yaml"]

# Far above any honest manifest; an anchor bomb hits this in microseconds.
_MAX_NODES = 200_000
_MAX_DEPTH = 64

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Node:
    """Where a value sits: the mark of its key (for mapping entries) and of the value."""

    key: Location
    value: Location
    plain: bool  # an unquoted, single-line scalar, so column offsets into it are exact
    text: str | None = None  # a scalar as written, e.g. "3.10" before YAML makes it 3.1


class Positions:
    """Maps key paths such as ("binaries", "meshctl", "outputs", 0) to locations."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._nodes: dict[KeyPath, Node] = {}

    def add(self, path: KeyPath, node: Node) -> None:
        """Record where `path` is."""
        self._nodes[path] = node

    def node(self, path: KeyPath) -> Node:
        """The nearest recorded node at or above `path` (the document root at worst)."""
        for cut in range(len(path), -1, -1):
            found = self._nodes.get(path[:cut])
            if found is not None:
                return found
        start = Location(self.file, 1, 1)
        return Node(start, start, False)

    def has(self, path: KeyPath) -> bool:
        """Whether `path` itself was written in the file."""
        return path in self._nodes


def _loc(file: Path, mark: yaml.Mark | None) -> Location:
    if mark is None:
        return Location(file, 1, 1)
    return Location(file, mark.line + 1, mark.column + 1)


def _fail(
    file: Path, mark: yaml.Mark | None, message: str, hint: str = "", path: str = ""
) -> NoReturn:
    raise ManifestError([Problem(_loc(file, mark), path, message, hint)])


def _decode(file: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        # Columns count characters everywhere else, so count them here too.
        column = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        raise ManifestError(
            [
                Problem(
                    Location(file, line, column),
                    "",
                    f"byte 0x{data[exc.start]:02x} is not UTF-8",
                    "save the file as UTF-8",
                )
            ]
        ) from None


class _Builder:
    def __init__(self, file: Path, loader: yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader
        self.positions = Positions(file)
        self.count = 0
        # An alias is the same node object again: build it once and charge its
        # size on every use, so a "billion laughs" fails after a few thousand steps.
        self.built: dict[int, tuple[Any, int]] = {}

    def _charge(self, amount: int, node: yaml.Node) -> None:
        self.count += amount
        if self.count > _MAX_NODES:
            _fail(self.file, node.start_mark, f"more than {_MAX_NODES} values (an alias bomb?)")

    def build(self, node: yaml.Node, path: KeyPath, key_mark: yaml.Mark | None) -> Any:
        if len(path) > _MAX_DEPTH:
            _fail(self.file, node.start_mark, f"nested deeper than {_MAX_DEPTH} levels")
        seen = self.built.get(id(node))
        if seen is not None:
            self._charge(seen[1], node)
            return seen[0]
        start = self.count
        self._charge(1, node)
        plain = isinstance(node, yaml.ScalarNode) and node.style is None
        plain = plain and node.start_mark.line == node.end_mark.line
        text = node.value if isinstance(node, yaml.ScalarNode) else None
        key_at = _loc(self.file, key_mark or node.start_mark)
        self.positions.add(path, Node(key_at, _loc(self.file, node.start_mark), plain, text))
        value: Any
        if isinstance(node, yaml.MappingNode):
            value = self._mapping(node, path)
        elif isinstance(node, yaml.SequenceNode):
            value = [self.build(item, (*path, i), None) for i, item in enumerate(node.value)]
        else:
            value = self.loader.construct_object(node, deep=True)
        self.built[id(node)] = (value, self.count - start)
        return value

    def _merged(self, node: yaml.Node, path: KeyPath) -> list[dict[str, Any]]:
        """The mappings a "<<" key merges in, in the order YAML gives them priority."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        merged: list[dict[str, Any]] = []
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                _fail(self.file, source.start_mark, "'<<' merges only mappings")
            merged.append(self.build(source, path, None))
        return merged

    def _mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        inherited: list[dict[str, Any]] = []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                inherited.extend(self._merged(value_node, path))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                _fail(self.file, key_node.start_mark, "a key must be a plain string")
            key = self.loader.construct_object(key_node)
            if not isinstance(key, str):
                key = str(key)
            if key in out:
                first = self.positions.node((*path, key)).key
                _fail(
                    self.file,
                    key_node.start_mark,
                    f"duplicate key '{key}'",
                    f"it is already set at line {first.line}; keep one",
                    ".".join(str(p) for p in (*path, key)),
                )
            out[key] = self.build(value_node, (*path, key), key_node.start_mark)
        # The mapping's own keys win over merged ones; earlier merge sources win
        # over later ones (YAML's merge key).
        for source in inherited:
            for key, value in source.items():
                out.setdefault(key, value)
        return out


def load_yaml(file: Path, data: bytes) -> tuple[Any, Positions]:
    """Parse one YAML document into plain values and the positions of its nodes."""
    text = _decode(file, data)
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        _fail(file, None, "the manifest is empty", "start with 'schema: 1' and a 'binaries:' map")
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            _fail(file, None, "the manifest is empty", "start with 'schema: 1'")
        builder = _Builder(file, loader)
        value = builder.build(root, (), None)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise ManifestError(
            [Problem(_loc(file, mark), "", f"YAML syntax: {problem}", "fix the YAML syntax here")]
        ) from None
    except yaml.YAMLError as exc:
        raise ManifestError([Problem(Location(file, 1, 1), "", f"YAML: {exc}")]) from None
    except RecursionError:
        raise ManifestError(
            [Problem(Location(file, 1, 1), "", "nested too deeply to read")]
        ) from None
    finally:
        loader.dispose()
    return value, builder.positions
