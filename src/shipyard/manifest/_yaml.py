"""YAML to plain values plus the position of every key and value.

We compose nodes from the parser's events and construct values from those nodes
ourselves, so that we keep every mark, reject duplicate keys (PyYAML silently
keeps the last one) and bound the work a hostile file can cause: its size, its
nesting and its node count are checked as the events arrive, before anything
large is built, and an alias is charged its full size on every use, so a
"billion laughs" fails after a few thousand steps. libyaml's parser is used where
PyYAML has it: it reads a file some twenty times faster than the pure-Python one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from shipyard.errors import Location, ManifestError, Problem
from shipyard.manifest._report import dotted, shown

__all__ = ["Node", "Positions", "load_yaml"]

# Far above any honest manifest (this repository's is under 2 KiB with under two
# hundred keys and values), low enough that reaching a bound takes well under a second.
_MAX_BYTES = 1 << 20
_MAX_NODES = 20_000
_MAX_DEPTH = 64

# What YAML allows in a stream (YAML 1.1, section 5.1). Escapes in double-quoted
# scalars must not smuggle in anything else: NUL, terminal controls, lone surrogates.
_NOT_PRINTABLE = re.compile(
    r"[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
_CORE = "tag:yaml.org,2002:"
# Explicit tags a manifest may use, and the kind of node each may stand on; the
# rest (!!binary, !!python/..., local !tags) have no meaning in binaries.yaml.
_TAGS: dict[str, type[yaml.Node]] = {
    **{_CORE + t: yaml.ScalarNode for t in ("str", "int", "float", "bool", "null")},
    _CORE + "seq": yaml.SequenceNode,
    _CORE + "map": yaml.MappingNode,
}

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
        # What was wrong but did not stop the reading, with the path of the value it
        # spoils: a scalar that cannot be read; None for a duplicate key, whose first
        # value stands.
        self.problems: list[tuple[KeyPath | None, Problem]] = []

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


def _loc(file: Path, mark: Any) -> Location:
    if mark is None:
        return Location(file, 1, 1)
    return Location(file, mark.line + 1, mark.column + 1)


def _fail(file: Path, mark: Any, message: str, hint: str = "", path: str = "") -> NoReturn:
    raise ManifestError([Problem(_loc(file, mark), path, message, hint)])


def _at_offset(file: Path, text: str, offset: int) -> Location:
    line = text.count("\n", 0, offset) + 1
    return Location(file, line, offset - (text.rfind("\n", 0, offset) + 1) + 1)


def _decode(file: Path, data: bytes) -> str:
    if len(data) > _MAX_BYTES:
        raise ManifestError(
            [
                Problem(
                    Location(file, 1, 1),
                    "",
                    f"the manifest is {len(data)} bytes; at most {_MAX_BYTES} are read",
                    "a manifest is a few kilobytes: is this the right file?",
                )
            ]
        )
    try:
        text = data.decode("utf-8")
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
    bad = _NOT_PRINTABLE.search(text)
    if bad:
        raise ManifestError(
            [
                Problem(
                    _at_offset(file, text, bad.start()),
                    "",
                    f"character U+{ord(bad.group()):04X} is not allowed in YAML",
                    "remove it",
                )
            ]
        )
    return text


class _Composer:
    """Nodes from the parser's events, as PyYAML's composer makes them, within bounds."""

    def __init__(self, file: Path, loader: yaml.SafeLoader) -> None:
        self.file = file
        # The event API (PyYAML's Parser or libyaml's CParser) has no type stubs.
        self.loader: Any = loader
        self.anchors: dict[str, yaml.Node] = {}
        self.count = 0

    def single(self) -> yaml.Node | None:
        """The root node of the only document, or None for an empty stream."""
        events = self.loader
        events.get_event()  # stream start
        root = None
        if not events.check_event(yaml.StreamEndEvent):
            document = events.get_event()
            root = self._node(1)
            events.get_event()  # document end
            if not events.check_event(yaml.StreamEndEvent):
                _fail(
                    self.file,
                    events.get_event().start_mark,
                    "a second YAML document",
                    f"the manifest is one document; remove this '---' and what follows "
                    f"(the first starts at line {document.start_mark.line + 1})",
                )
        events.get_event()  # stream end
        return root

    def _node(self, depth: int) -> yaml.Node:
        event = self.loader.get_event()
        self.count += 1
        if self.count > _MAX_NODES:
            _fail(
                self.file,
                event.start_mark,
                f"more than {_MAX_NODES} values",
                "a manifest is a few hundred: is this the right file?",
            )
        if isinstance(event, yaml.AliasEvent):
            aliased = self.anchors.get(str(event.anchor))
            if aliased is None:
                _fail(
                    self.file,
                    event.start_mark,
                    f"alias *{event.anchor} names no anchor before it",
                    f"define &{event.anchor} first",
                )
            return aliased
        if depth > _MAX_DEPTH:
            _fail(self.file, event.start_mark, f"nested deeper than {_MAX_DEPTH} levels")
        node = self._start(event)
        if event.anchor is not None:
            # A later anchor of the same name replaces the earlier one (YAML 1.2, 3.2.2.2).
            self.anchors[event.anchor] = node
        if isinstance(node, yaml.SequenceNode):
            while not self.loader.check_event(yaml.SequenceEndEvent):
                node.value.append(self._node(depth + 1))
        elif isinstance(node, yaml.MappingNode):
            while not self.loader.check_event(yaml.MappingEndEvent):
                key = self._node(depth + 1)
                node.value.append((key, self._node(depth + 1)))
        if not isinstance(node, yaml.ScalarNode):
            node.end_mark = self.loader.get_event().end_mark
        return node

    def _start(self, event: Any) -> yaml.Node:
        kind: type[yaml.Node]
        if isinstance(event, yaml.ScalarEvent):
            kind = yaml.ScalarNode
        elif isinstance(event, yaml.SequenceStartEvent):
            kind = yaml.SequenceNode
        else:
            kind = yaml.MappingNode
        tag = event.tag
        if tag is None or tag == "!":
            value = event.value if kind is yaml.ScalarNode else None
            tag = self.loader.resolve(kind, value, event.implicit)
        elif _TAGS.get(tag) is not kind:
            _fail(
                self.file,
                event.start_mark,
                f"YAML tag {shown(tag.replace(_CORE, '!!'))} is not allowed here",
                "remove the tag; quote a value to make it a string",
            )
        if kind is yaml.ScalarNode:
            bad = _NOT_PRINTABLE.search(event.value)
            if bad:
                _fail(
                    self.file,
                    event.start_mark,
                    f"the value holds U+{ord(bad.group()):04X}, which no manifest value may hold",
                    "remove the escape that writes it",
                )
            return yaml.ScalarNode(
                tag, event.value, event.start_mark, event.end_mark, style=event.style
            )
        if kind is yaml.SequenceNode:
            return yaml.SequenceNode(tag, [], event.start_mark, None, flow_style=event.flow_style)
        return yaml.MappingNode(tag, [], event.start_mark, None, flow_style=event.flow_style)


class _Builder:
    def __init__(self, file: Path, loader: yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader
        self.positions = Positions(file)
        self.count = 0
        # An alias is the same node object again: build it once and charge its
        # size on every use.
        self.built: dict[int, tuple[Any, int]] = {}

    def _charge(self, amount: int, node: yaml.Node) -> None:
        self.count += amount
        if self.count > _MAX_NODES:
            _fail(
                self.file,
                node.start_mark,
                f"more than {_MAX_NODES} values (an alias bomb?)",
                "each use of an alias counts its values again; use fewer",
            )

    def build(self, node: yaml.Node, path: KeyPath, key_mark: yaml.Mark | None) -> Any:
        if len(path) > _MAX_DEPTH:
            _fail(self.file, node.start_mark, f"nested deeper than {_MAX_DEPTH} levels")
        seen = self.built.get(id(node))
        if seen is not None:
            self._charge(seen[1], node)
            return seen[0]
        start = self.count
        self._charge(1, node)
        # A plain scalar has style None (PyYAML) or "" (libyaml).
        plain = isinstance(node, yaml.ScalarNode) and not node.style
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
            value = self._scalar(node, path)
        self.built[id(node)] = (value, self.count - start)
        return value

    def _scalar(self, node: yaml.Node, path: KeyPath) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except (ValueError, KeyError, OverflowError) as exc:
            # e.g. a 5000-digit number, 2024-13-45, or `!!bool maybe`: reported, and the
            # text stands in for the value so that the rest of the file is still checked.
            reason = exc.args[0] if exc.args and isinstance(exc.args[0], str) else type(exc)
            message = f"cannot read {shown(node.value)} as a {node.tag.replace(_CORE, '')}"
            problem = Problem(
                _loc(self.file, node.start_mark),
                dotted(path),
                f"{message}: {reason}",
                "quote it to make it a string",
            )
            self.positions.problems.append((path, problem))
            return str(node.value)

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
            if key_node.tag == _CORE + "merge":
                inherited.extend(self._merged(value_node, path))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                _fail(self.file, key_node.start_mark, "a key must be a plain string")
            # Keys are names: take them as written, so `1.10:` is "1.10" and `yes:` is "yes".
            key = str(key_node.value)
            if key in out:
                # The first one counts; the rest of the file is still checked.
                first = self.positions.node((*path, key)).key
                problem = Problem(
                    _loc(self.file, key_node.start_mark),
                    dotted((*path, key)),
                    f"duplicate key {shown(key)}",
                    f"it is already set at line {first.line}; keep one",
                )
                self.positions.problems.append((None, problem))
                continue
            out[key] = self.build(value_node, (*path, key), key_node.start_mark)
        # The mapping's own keys win over merged ones; earlier merge sources win
        # over later ones (YAML's merge key).
        for source in inherited:
            for key, value in source.items():
                out.setdefault(key, value)
        return out


def _new_loader(text: str) -> yaml.SafeLoader:
    loader_class: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader: yaml.SafeLoader = loader_class(text)
    return loader


def load_yaml(file: Path, data: bytes, *, keep_going: bool = False) -> tuple[Any, Positions]:
    """Parse one YAML document into plain values and the positions of its nodes.

    A syntax error stops the reading. A duplicate key or a scalar that cannot be
    read raises too, unless `keep_going`: then it is left in `Positions.problems`
    and the first key, or the scalar's text, stands in.
    """
    text = _decode(file, data)
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        _fail(file, None, "the manifest is empty", "start with 'schema: 1' and a 'binaries:' map")
    loader = _new_loader(text)
    try:
        root = _Composer(file, loader).single()
        if root is None:
            _fail(file, None, "the manifest is empty", "start with 'schema: 1'")
        builder = _Builder(file, loader)
        value = builder.build(root, (), None)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        # libyaml's words for what PyYAML calls "expected ',' or ']'"
        problem = problem.removeprefix("did not find ")
        if "maximum nesting depth" in problem:  # newer libyaml stops deep nesting itself
            raise ManifestError(
                [
                    Problem(
                        _loc(file, mark),
                        "",
                        f"nested deeper than {_MAX_DEPTH} levels",
                        "flatten the structure; a manifest needs a few levels",
                    )
                ]
            ) from None
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
    if builder.positions.problems and not keep_going:
        raise ManifestError([problem for _, problem in builder.positions.problems])
    return value, builder.positions
