"""The manifest reference page, from the JSON Schema of the model that validates it.

Every key of binaries.yaml with its type, default, description and an example: the
schema (`shipyard.manifest._schema.json_schema`, made from the pydantic models) gives
all but the example, which is the first value the repository's own manifests
(binaries.yaml and examples/*/binaries.yaml) give the key, or the schema's `examples`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from shipyard._docs._markdown import code, table
from shipyard.manifest._schema import json_schema

__all__ = ["Key", "all_keys", "page", "undocumented"]

_ROOT = Path(__file__).resolve().parents[3]  # the repository, when run from a checkout


@dataclass(frozen=True)
class Key:
    """One key of binaries.yaml: its dotted path (`<name>` for a name you choose)."""

    path: str
    type: str
    required: bool
    default: str
    description: str
    example: str
    section: str  # the model the key belongs to, e.g. ImageDoc


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    return defs[ref.rsplit("/", 1)[1]] if isinstance(ref, str) else node


def _options(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The alternatives of a node without the `null` one (an optional key's)."""
    alternatives = node.get("anyOf") or node.get("oneOf") or [node]
    return [a for a in alternatives if a.get("type") != "null"]


def _type(node: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    names = []
    for option in _options(node):
        if "$ref" in option:
            names.append("mapping")
        elif "const" in option:
            names.append(json.dumps(option["const"]))
        elif "enum" in option:
            names.append(" | ".join(json.dumps(v) for v in option["enum"]))
        elif option.get("type") == "array":
            names.append(f"list of {_type(option.get('items', {}), defs)}")
        elif "patternProperties" in option or "additionalProperties" in option:
            names.append("mapping of names")
        elif option.get("type"):
            names.append(str(option["type"]))
        elif "items" in option or option.get("oneOf") or option.get("anyOf"):
            names.append(_type(option, defs))
    return " or ".join(dict.fromkeys(names)) or "any"


def _children(
    node: Mapping[str, Any], defs: Mapping[str, Any]
) -> Iterator[tuple[str, Mapping[str, Any], str | None]]:
    """The keys under `node`: (suffix, schema, model name) for a model's properties,
    ("<name>", value schema, None) for a map of names."""
    for option in _options(node):
        model = option["$ref"].rsplit("/", 1)[1] if "$ref" in option else None
        target = _resolve(option, defs)
        if "properties" in target:
            for name, sub in target["properties"].items():
                yield f".{name}", sub, model
        for pattern_node in (target.get("patternProperties") or {}).values():
            yield ".<name>", pattern_node, None
        extra = target.get("additionalProperties")
        if isinstance(extra, dict):
            yield ".<name>", extra, None
        if target.get("type") == "array" and isinstance(target.get("items"), dict):
            yield "[]", target["items"], None


def _examples(roots: list[object], suffix: str) -> list[object]:
    """The values under `suffix` of each document in `roots` (maps of names: every one)."""
    found: list[object] = []
    for value in roots:
        if suffix == ".<name>" and isinstance(value, dict):
            found += list(value.values())
        elif suffix == "[]" and isinstance(value, list):
            found += value
        elif suffix.startswith(".") and isinstance(value, dict) and suffix[1:] in value:
            found.append(value[suffix[1:]])
    return found


def _show(value: object) -> str:
    if isinstance(value, dict | list):
        text = json.dumps(value)
        return text if len(text) <= 60 else ""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def _walk(
    node: Mapping[str, Any],
    defs: Mapping[str, Any],
    path: str,
    docs: list[object],
    seen: frozenset[str],
) -> Iterator[Key]:
    for suffix, sub, model in _children(node, defs):
        here = path + suffix
        values = _examples(docs, suffix)
        if suffix.startswith(".") and suffix != ".<name>":
            leaf = [v for v in values if not isinstance(v, dict)] or values
            example = next((_show(v) for v in leaf if _show(v)), "")
            if not example and sub.get("examples"):
                example = _show(sub["examples"][0])
            parent = defs.get(model or "", {})
            default = sub.get("default")
            yield Key(
                here.lstrip("."),
                _type(sub, defs),
                suffix[1:] in parent.get("required", ()),
                "" if default in (None, {}) else json.dumps(default),
                str(sub.get("description") or _own_description(sub, defs)),
                example,
                model or "",
            )
        refs = {o["$ref"] for o in _options(sub) if "$ref" in o}
        if refs & seen:
            continue
        yield from _walk(sub, defs, here, values, seen | refs)


def _own_description(node: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """The description of the model a key holds, when the key has none of its own."""
    for option in _options(node):
        if "$ref" in option:
            return str(_resolve(option, defs).get("description", ""))
    return ""


def _documents(root: Path) -> list[object]:
    found: list[object] = []
    for path in [root / "binaries.yaml", *sorted(root.glob("examples/*/binaries.yaml"))]:
        if path.is_file():
            found.append(yaml.safe_load(path.read_text(encoding="utf-8")))
    return found


def all_keys(root: Path = _ROOT) -> list[Key]:
    """Every key of binaries.yaml, in the schema's order, with examples from `root`'s manifests."""
    schema = json_schema()
    defs = schema.get("$defs", {})
    top = {"properties": schema["properties"], "required": schema.get("required", [])}
    found = list(_walk(top, {**defs, "": top}, "", _documents(root), frozenset()))
    # A key of a model used in several places (ImageDoc under defaults and under each
    # binary) takes an example from wherever the manifests give it one.
    shared: dict[tuple[str, str], str] = {}
    for key in found:
        if key.example and key.section:
            shared.setdefault((key.section, key.path.rsplit(".", 1)[-1]), key.example)
    return [
        replace(k, example=shared.get((k.section, k.path.rsplit(".", 1)[-1]), ""))
        if not k.example and k.section
        else k
        for k in found
    ]


def undocumented(found: list[Key] | None = None) -> list[str]:
    """The paths of the keys with no description, neither their own nor their model's."""
    return [k.path for k in (all_keys() if found is None else found) if not k.description.strip()]


def page(root: Path = _ROOT) -> str:
    """docs/reference/manifest.md."""
    found = all_keys(root)
    out = [
        "# Manifest: binaries.yaml\n",
        "Generated from the pydantic model that validates binaries.yaml, the same one "
        "`shipyard schema` prints as a JSON Schema (point your editor at "
        "binaries.schema.json for completion). `<name>` stands for a name you choose "
        "(a binary, a group, a variant, a stage, an environment variable); `[]` for "
        "each item of a list. Examples are taken from this repository's own manifests.\n",
        "```yaml\n# yaml-language-server: $schema=binaries.schema.json\nschema: 1\n"
        "project: {name: acme}\nbinaries:\n  acme-cli:\n    source: apps/cli\n"
        "    entrypoint: acme_cli.main:run\n```\n",
    ]
    sections: dict[str, list[Key]] = {}
    for key in found:
        top = key.path.split(".")[0]
        sections.setdefault(top, []).append(key)
    for top, rows in sections.items():
        out.append(f"## {top}\n")
        out.append(
            table(
                ("key", "type", "default", "meaning", "example"),
                (
                    (
                        code(k.path) + (" (required)" if k.required else ""),
                        k.type,
                        k.default and code(k.default),
                        k.description,
                        k.example and code(k.example),
                    )
                    for k in rows
                ),
            )
        )
    return "\n".join(out)
