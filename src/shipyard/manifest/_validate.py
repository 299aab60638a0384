"""Full validation of binaries.yaml with pydantic: every problem with its position."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from shipyard.errors import Location, ManifestError, Problem
from shipyard.manifest._expand import expand_all
from shipyard.manifest._model import (
    PYTHON_PLACEHOLDER,
    BinaryDoc,
    ImageDoc,
    ManifestDoc,
    SizeDoc,
    StageDoc,
    TestsDoc,
    ZipappDoc,
)
from shipyard.manifest._references import (
    Folders,
    Resolved,
    check_references,
    requirements,
    source,
)
from shipyard.manifest._report import MAX_PROBLEMS, capped, dotted, shown
from shipyard.manifest._types import (
    IMAGE_PLATFORMS,
    PLATFORMS,
    Binary,
    Image,
    Manifest,
    Project,
    Service,
    SizeBudget,
    Stage,
    StageEntry,
    Tests,
    Variant,
    Zipapp,
    did_you_mean,
    parse_duration,
    parse_size,
)
from shipyard.manifest._yaml import KeyPath, Positions, load_yaml

__all__ = ["validate"]

_DEFAULT_OUTPUTS = ("wheel",)
_DEFAULT_PLATFORMS = ("linux/amd64", "linux/arm64")
_DEFAULT_HOSTS = ("linux", "darwin", "windows")


def _model_at(path: KeyPath) -> type[BaseModel] | None:
    """The model that validates the mapping at `path`, for naming its allowed keys."""
    current: Any = ManifestDoc
    for part in path:
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            if info is None:
                info = next((f for f in current.model_fields.values() if f.alias == part), None)
            if info is None:
                return None
            current = info.annotation
        else:
            args = [a for a in typing.get_args(current) if a is not type(None)]
            origin = typing.get_origin(current)
            if origin in (typing.Union, types.UnionType) and len(args) == 1:
                current = args[0]
                args = [a for a in typing.get_args(current) if a is not type(None)]
                origin = typing.get_origin(current)
            if origin is dict:
                current = args[1]
            elif origin is list:
                current = args[0]
            else:
                return None
        while typing.get_origin(current) in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(current) if a is not type(None)]
            current = options[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items()]


_FRIENDLY = {
    "string_type": "expected a string",
    "int_type": "expected a whole number",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "bool_type": "expected true or false",
    "int_parsing_size": "the number is too large",
}


def _problem_for(error: Any, positions: Positions) -> Problem:
    loc: KeyPath = tuple(error["loc"])
    kind = error["type"]
    if loc and loc[-1] == "[key]":
        # A mapping key broke its pattern (a binary or group name): point at the key.
        loc = loc[:-1]
        node = positions.node(loc)
        return Problem(
            node.key,
            dotted(loc),
            f"{shown(loc[-1])} is not a valid {_what(loc[:-1])}",
            _pattern_hint(loc[:-1]),
        )
    node = positions.node(loc)
    if kind == "extra_forbidden":
        key = str(loc[-1])
        model = _model_at(loc[:-1])
        allowed = _allowed_keys(model) if model else []
        hint = did_you_mean(key, allowed) or (
            "allowed keys: " + ", ".join(allowed) if allowed else "remove it"
        )
        return Problem(node.key, dotted(loc), f"unknown key {shown(key)}", hint)
    if kind == "missing":
        parent = positions.node(loc[:-1])
        return Problem(parent.key, dotted(loc), f"required key '{loc[-1]}' is missing", "add it")
    value = error.get("input")
    if kind == "literal_error" and value in PLATFORMS and "image" in loc:
        return Problem(
            node.value,
            dotted(loc),
            f"{shown(value)} is not allowed",
            "images are Linux only (macOS and Windows are zipapp platforms): list "
            "Linux platforms here, e.g. linux/amd64, linux/arm64",
        )
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        choices = [c.strip().strip("'") for c in str(expected).replace(" or ", ",").split(",")]
        hint = (did_you_mean(str(value), choices) if isinstance(value, str) else "") or (
            f"expected {expected}"
        )
        return Problem(node.value, dotted(loc), f"{shown(value)} is not allowed", hint)
    if kind == "value_error":
        reason = str(error.get("ctx", {}).get("error", error["msg"]))
        return Problem(node.value, dotted(loc), f"{shown(value)} is not allowed", reason)
    if kind == "string_pattern_mismatch" and _is_python(loc):
        if len(loc) == 3 and not positions.has(loc):
            loc = loc[:2]  # written as one string, held as a list of one
        return Problem(
            node.value,
            dotted(loc),
            f"{shown(value)} is not a valid Python version",
            _python_hint(value),
        )
    if kind == "string_pattern_mismatch":
        return Problem(
            node.value,
            dotted(loc),
            f"{shown(value)} is not a valid {_what(loc)}",
            _pattern_hint(loc),
        )
    if kind == "too_short":
        if loc == ("binaries",):
            return Problem(node.key, "binaries", "no binaries declared", "declare at least one")
        return Problem(
            node.value,
            dotted(loc),
            "the list is empty",
            "list at least one value, or leave the key out for the default",
        )
    message = _FRIENDLY.get(kind, error["msg"])
    hint = ""
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        # The text as written; a value reached through an alias has none recorded.
        written = node.text if positions.has(loc) else None
        hint = f'quote it: "{written}"' if written and len(written) <= 40 else "quote it"
    where = node.key if isinstance(value, dict | list) and not positions.has(loc) else node.value
    return Problem(where, dotted(loc), f"{message}, got {type(value).__name__}", hint)


# pydantic names the branch of a union an error came from in its location: the stage
# entries of `tests:` are a mapping or `false`.
_BRANCHES = ("StageDoc", "literal[False]")


def _unbranched(errors: list[Any]) -> list[Any]:
    """Errors from inside a union (a test stage's mapping or `false`) as errors of the
    key itself: the branch names left out of the location, and the `false` branch
    said only as the hint of a value that is no mapping."""
    out: list[Any] = []
    for error in errors:
        loc = tuple(error["loc"])
        if not any(p in _BRANCHES or str(p).startswith("dict[") for p in loc):
            out.append(error)
            continue
        if loc[-1] == "literal[False]":
            continue  # the mapping branch's error says it, with this hint
        plain = tuple(p for p in loc if p not in _BRANCHES and not str(p).startswith("dict["))
        fixed = {**error, "loc": plain}
        if error["type"] in ("model_type", "dict_type"):
            fixed["type"] = "value_error"
            fixed["ctx"] = {"error": "write a mapping of its keys, or false to turn it off"}
        out.append(fixed)
    return out


def _problems(errors: list[Any], positions: Positions) -> tuple[list[Problem], int]:
    """Problems for pydantic's errors, leaving out knock-on ones; and how many errors
    were left unread.

    A misspelt required key shows up twice: "unknown key 'sorce'" and "required
    key 'source' is missing". The first, with its did-you-mean, says it all.
    """
    # Only the first few are shown: ten thousand unknown keys must not cost ten
    # thousand did-you-mean searches.
    problems = [_problem_for(e, positions) for e in errors[: MAX_PROBLEMS + 1]]
    typos = {
        (p.path.rsplit(".", 1)[0], p.hint.removeprefix("did you mean '").removesuffix("'?"))
        for p in problems
        if p.message.startswith("unknown key") and p.hint.startswith("did you mean")
    }
    kept = [
        p
        for p in problems
        if not (p.message.startswith("required key") and tuple(p.path.rsplit(".", 1)) in typos)
    ]
    return kept, len(errors) - len(problems)


def _is_python(loc: KeyPath) -> bool:
    """Whether `loc` is project.python or one of its list items."""
    return loc[:2] == ("project", "python")


_PATCH = re.compile(r"(?:python|py|cp)?-?(3)\.([0-9]{1,2})(?:\.[0-9]+)?")


def _python_hint(value: object) -> str:
    """How to write a target Python: major.minor in quotes, one or a list."""
    found = _PATCH.fullmatch(value.strip()) if isinstance(value, str) else None
    example = f"{found[1]}.{found[2]}" if found else "3.12"
    return (
        f'write major.minor in quotes, e.g. "{example}", or a list such as ["3.11", "{example}"]'
        if example != "3.11"
        else 'write major.minor in quotes, e.g. "3.11", or a list such as ["3.11", "3.12"]'
    )


def _what(loc: KeyPath) -> str:
    if "entrypoint" in loc:
        return "entry point"
    if _is_python(loc):
        return "Python version"
    if "env" in loc:
        return "environment variable name"
    if loc[:1] == ("groups",):
        return "group name"
    if loc[:1] == ("binaries",) and len(loc) == 1:
        return "binary name"
    if _is_stage(loc):
        return "stage name"
    return "name"


def _is_stage(loc: KeyPath) -> bool:
    """Whether `loc` holds stages by name: tests.stages or tests.projects.<name>."""
    return loc == ("tests", "stages") or (len(loc) == 3 and loc[:2] == ("tests", "projects"))


def _pattern_hint(loc: KeyPath) -> str:
    if "entrypoint" in loc:
        return "write module.path:function, e.g. meshctl.cli:main"
    if _is_python(loc):
        return 'write major.minor in quotes, e.g. "3.11"'
    if "env" in loc:
        return "letters, digits and _, not starting with a digit"
    if "allow_missing_libraries" in loc:
        return "give a library's file name, e.g. libstdc++.so.6, or '*' for any"
    if _is_stage(loc):
        return "a stage name is lower-case letters, digits and -, starting with a letter"
    if loc[:1] == ("tests",) and "groups" in loc:
        return "a dependency group's name: letters, digits and . _ -"
    return "use lower-case letters, digits and . _ - (starting and ending alphanumeric)"


def _merge_image(
    default: ImageDoc | None, own: ImageDoc | None, platforms: tuple[str, ...]
) -> Image:
    merged: dict[str, Any] = {}
    for doc in (default, own):
        if doc is None:
            continue
        for key, value in doc.model_dump(exclude_none=True).items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return Image(
        base=merged.get("base"),
        hubs=tuple(merged.get("hubs", ())),
        tags=tuple(merged.get("tags", ())),
        user=merged.get("user"),
        workdir=merged.get("workdir"),
        env=types.MappingProxyType(dict(merged.get("env", {}))),
        labels=types.MappingProxyType(dict(merged.get("labels", {}))),
        dockerfile=merged.get("dockerfile"),
        platforms=tuple(dict.fromkeys(merged.get("platforms") or platforms)),
        variants=types.MappingProxyType(
            {
                name: Variant(v.get("base"), types.MappingProxyType(dict(v.get("env") or {})))
                for name, v in merged.get("variants", {}).items()
            }
        ),
        protected=tuple(merged.get("protected", ())),
        movable_tags=tuple(merged.get("movable_tags", Image.movable_tags)),
        allow_missing_libraries=tuple(merged.get("allow_missing_libraries", ())),
    )


def _per_python(
    image: Image, pythons: Sequence[str], on_clash: typing.Callable[[str], None]
) -> Image:
    """`image` with `${python}` in its bases expanded: the image and its declared
    variants for the first Python, and, when `image.base` uses `${python}`, one more
    variant per other Python (`python3.12`, and `debug-python3.12` for each declared
    variant whose base uses it too), resolved for that Python. A Dockerfile image is
    left for its Dockerfile to decide. `on_clash` is told of a declared variant whose
    name an added one takes."""

    def at(text: str | None, version: str) -> str | None:
        return text.replace(PYTHON_PLACEHOLDER, version) if text else text

    first = pythons[0]
    variants = {
        n: dataclasses.replace(v, base=at(v.base, first)) for n, v in image.variants.items()
    }
    added: dict[str, Variant] = {}
    if image.base and PYTHON_PLACEHOLDER in image.base and not image.dockerfile:
        for version in pythons[1:]:
            added[f"python{version}"] = Variant(
                at(image.base, version), types.MappingProxyType({}), version
            )
            for name, declared in image.variants.items():
                base = declared.base or image.base
                if PYTHON_PLACEHOLDER in base:
                    added[f"{name}-python{version}"] = Variant(
                        at(base, version), declared.env, version
                    )
    for name in sorted(set(added) & set(variants)):
        on_clash(name)
    return dataclasses.replace(
        image,
        base=at(image.base, first),
        variants=types.MappingProxyType({**variants, **added}),
    )


def _merge_size(default: SizeDoc | None, own: SizeDoc | None) -> dict[str, SizeBudget]:
    merged: dict[str, dict[str, str]] = {}
    for doc in (default, own):
        if doc is not None:
            for kind, budget in doc.model_dump(exclude_none=True).items():
                merged[kind] = {**merged.get(kind, {}), **budget}
    return {
        kind: SizeBudget(
            **{k: parse_size(v) for k, v in budget.items()}  # checked by the model already
        )
        for kind, budget in merged.items()
    }


def _undeclared_extras(binary: Binary) -> list[str]:
    """The binary's extras its project does not declare (none when they are dynamic or
    the pyproject cannot be read: the wheel build reports that)."""
    if not binary.extras:
        return []
    import tomllib

    from packaging.utils import canonicalize_name

    from shipyard import _toml

    try:
        project = _toml.loads((binary.source / "pyproject.toml").read_text()).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    if not isinstance(project, dict) or "optional-dependencies" in project.get("dynamic", []):
        return []
    declared = project.get("optional-dependencies", {})
    names = {canonicalize_name(n) for n in declared} if isinstance(declared, dict) else set()
    return [e for e in binary.extras if canonicalize_name(e) not in names]


def _check_binary(binary: Binary, positions: Positions, problems: list[Problem]) -> None:
    """What holds across keys, checked once defaults are merged in."""
    at = ("binaries", binary.name)

    def where(*keys: KeyPath) -> Location:
        found = next((k for k in keys if positions.has(k)), at)
        return positions.node(found).value if found != at else positions.node(at).key

    foreign = [p for p in binary.image.platforms if p not in IMAGE_PLATFORMS]
    if "image" in binary.outputs and foreign:
        # image.platforms is Linux by its type, so these came from the binary's platforms.
        linux = [p for p in binary.image.platforms if p in IMAGE_PLATFORMS]
        example = ", ".join(linux or ("linux/amd64", "linux/arm64"))
        problems.append(
            Problem(
                where((*at, "platforms"), ("defaults", "platforms")),
                dotted((*at, "image", "platforms")),
                f"{binary.name}'s image would be built for {', '.join(foreign)}, "
                "but images are Linux only (macOS and Windows are zipapp platforms)",
                f"set image.platforms to the Linux ones, e.g. [{example}]",
            )
        )
    declared = [n for n, v in binary.image.variants.items() if v.python is None]
    if "image" in binary.outputs and binary.image.dockerfile and declared:
        mine = positions.has((*at, "image", "variants"))
        problems.append(
            Problem(
                where((*at, "image", "variants"), ("defaults", "image", "variants")),
                dotted((*at, "image", "variants")),
                f"{binary.name}'s image is built from a Dockerfile (image.dockerfile), which "
                f"cannot take variants ({', '.join(sorted(declared))}): only the daemonless "
                "builder builds them",
                "remove image.variants (or image.dockerfile), or build each variant from its "
                "own Dockerfile as another binary"
                if mine
                else "defaults.image.variants apply to every binary: move them to the "
                "binaries whose images are built without a Dockerfile",
            )
        )
    unknown = [h for h in binary.image.protected if h not in binary.image.hubs]
    if unknown:
        problems.append(
            Problem(
                where((*at, "image", "protected"), ("defaults", "image", "protected")),
                dotted((*at, "image", "protected")),
                f"protected hub {shown(unknown[0])} is not one of {binary.name}'s hubs",
                "list it under image.hubs too, or write it exactly as hubs does",
            )
        )
    missing = _undeclared_extras(binary)
    if missing:
        problems.append(
            Problem(
                where((*at, "extras")),
                dotted((*at, "extras")),
                f"{binary.source / 'pyproject.toml'} declares no extra {shown(missing[0])}",
                "add it under [project.optional-dependencies], or fix the name",
            )
        )
    for kind, budget in binary.size.items():
        if budget.min is not None and budget.max is not None and budget.min > budget.max:
            problems.append(
                Problem(
                    where((*at, "size", kind), ("defaults", "size", kind)),
                    dotted((*at, "size", kind)),
                    f"the {kind} size budget's min is larger than its max",
                    "make min at most max",
                )
            )


def _check_pythons(pythons: Sequence[str], positions: Positions, problems: list[Problem]) -> None:
    """A target Python listed twice is a mistake (its archives and images would collide)."""
    seen: set[str] = set()
    for index, version in enumerate(pythons):
        if version in seen:
            key: KeyPath = ("project", "python", index)
            node = positions.node(key if positions.has(key) else ("project", "python"))
            problems.append(
                Problem(
                    node.value,
                    dotted(key),
                    f"Python {version} is listed twice",
                    "list each target Python once",
                )
            )
        seen.add(version)


_UV_WORKSPACE = re.compile(r"^\s*\[\s*tool\s*\.\s*uv\s*\.\s*workspace\s*\]", re.MULTILINE)


def _declares_workspace(pyproject: Path) -> bool:
    """Whether `pyproject` holds a `[tool.uv.workspace]` table (read only when its text
    names one, so the common case costs a file read)."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if "workspace" not in text:
        return False
    from shipyard import _toml

    try:
        tool = _toml.loads(text).get("tool", {})
    except ValueError:  # a broken pyproject is the workspace loader's to report
        return bool(_UV_WORKSPACE.search(text))
    uv = tool.get("uv") if isinstance(tool, dict) else None
    return isinstance(uv, dict) and isinstance(uv.get("workspace"), dict)


def _outside_its_workspace(
    name: str, source: Path, root: Path, positions: Positions, problems: list[Problem]
) -> None:
    """A problem when the binary's source lies in a uv workspace below `root`: that
    workspace's uv.lock and members would be read from the wrong root (silently, the
    lock not at all), so binaries.yaml belongs in the workspace's folder."""
    folder = source if source.is_absolute() else root / source
    for candidate in (folder, *folder.parents):
        if candidate == root or not candidate.is_relative_to(root):
            return
        if _declares_workspace(candidate / "pyproject.toml"):
            rel = candidate.relative_to(root).as_posix()
            key = ("binaries", name, "source")
            problems.append(
                Problem(
                    positions.node(key).value,
                    dotted(key),
                    f"{folder.relative_to(root).as_posix()} is in the uv workspace {rel}/ "
                    "(its pyproject.toml "
                    "has [tool.uv.workspace]), whose uv.lock and members are read only "
                    "from its own folder",
                    f"move binaries.yaml into {rel}/ and make its paths relative to it",
                )
            )
            return


def workspace_root(manifest_dir: Path) -> Path:
    """The folder a manifest's paths, lock and dist/ belong to: the nearest folder from
    the manifest's own up to the git work tree's top whose pyproject.toml declares a uv
    workspace, else the manifest's folder. A workspace below the repository root
    (`python/` beside `docs/` and other trees) is its own root; git still answers for
    the whole repository (versions, `affected`)."""
    for folder in (manifest_dir, *manifest_dir.parents):
        if _declares_workspace(folder / "pyproject.toml"):
            return folder
        if (folder / ".git").exists():
            break
    return manifest_dir


def _binary(
    name: str,
    doc: BinaryDoc,
    *,
    defaults: ManifestDoc,
    root: Path,
    base: Path,
    positions: Positions,
    problems: list[Problem],
    resolved: Resolved | None = None,
) -> Binary:
    """The binary `name` with the defaults merged in. Its source folder and lock file
    are checked (problems appended), unless `resolved` holds them, checked already."""
    d = defaults.defaults
    if resolved is None:
        folder = source(
            doc.source,
            where=positions.node(("binaries", name, "source")).value,
            key=dotted(("binaries", name, "source")),
            root=root,
            base=base,
            folders=Folders(base),
            problems=problems,
        )
        lock = requirements(name, doc.requirements, root, base, positions, problems)
    else:
        folder, lock = resolved
    platforms = tuple(dict.fromkeys(doc.platforms or d.platforms or _DEFAULT_PLATFORMS))
    pythons = tuple(dict.fromkeys(defaults.project.python))

    def clash(variant: str) -> None:
        key: KeyPath = ("binaries", name, "image", "variants", variant)
        if not positions.has(key):
            key = ("defaults", "image", "variants", variant)
        problems.append(
            Problem(
                positions.node(key).key
                if positions.has(key)
                else positions.node(("binaries", name)).key,
                dotted(("binaries", name, "image", "variants", variant)),
                f"variant {shown(variant)} is the name of the image for another target "
                "Python (project.python lists several and image.base uses ${python})",
                "rename the variant",
            )
        )

    binary = Binary(
        name=name,
        source=base / doc.source if folder is None else folder,
        entrypoint=doc.entrypoint,
        outputs=tuple(dict.fromkeys(doc.outputs or d.outputs or _DEFAULT_OUTPUTS)),
        platforms=platforms,
        host=tuple(doc.host or d.host or _DEFAULT_HOSTS),
        image=_per_python(_merge_image(d.image, doc.image, platforms), pythons, clash),
        smoke=tuple(doc.smoke if doc.smoke is not None else d.smoke or ()),
        zipapp=_merge_zipapp(d.zipapp, doc.zipapp),
        requirements=lock,
        extras=tuple(dict.fromkeys(doc.extras or ())),
        size=types.MappingProxyType(_merge_size(d.size, doc.size)),
    )
    _check_binary(binary, positions, problems)
    if "zipapp" in binary.outputs and binary.zipapp.compile and len(pythons) > 1:
        at = ("binaries", name, "zipapp", "compile")
        key = at if positions.has(at) else ("defaults", "zipapp", "compile")
        problems.append(
            Problem(
                positions.node(key).value if positions.has(key) else positions.node(at[:2]).key,
                dotted(at),
                f"zipapp.compile ships bytecode for one Python, but project.python lists "
                f"{', '.join(pythons)}",
                "set compile: false (Python compiles on first import), or list one Python",
            )
        )
    return binary


def _merge_zipapp(default: ZipappDoc | None, own: ZipappDoc | None) -> Zipapp:
    merged: dict[str, Any] = {}
    for doc in (default, own):
        if doc is not None:
            merged.update(doc.model_dump(exclude_none=True))
    return Zipapp(**merged)


def _in_order(
    manifest: Path, problems: list[Problem], anchors: Mapping[str, Location], unread: int
) -> list[Problem]:
    """The problems in the order of the file, capped; a lock file's problems follow the
    manifest key that names the lock file (`anchors`, by key path)."""

    def place(problem: Problem) -> tuple[int, int, int, int]:
        at = problem.location
        if at.file == manifest:
            return (at.line, at.column, 0, 0)
        anchor = anchors.get(problem.path, Location(manifest, 1 << 30, 0))
        return (anchor.line, anchor.column, at.line, at.column)

    ordered = sorted(problems, key=place)
    return capped(ordered, len(ordered) + unread)


def validate(path: Path, data: bytes, env: Mapping[str, str]) -> Manifest:
    """Parse, expand and validate manifest bytes; raise ManifestError listing problems.

    Every problem is reported at once, in the order of the file: the YAML's (but a
    syntax error stops the reading), the expansion's, the schema's, and those of what
    the manifest refers to (folders, lock files, group members). A value with a
    problem of its own is not checked again by a later stage, which would only
    repeat it in other words.
    """
    raw, positions = load_yaml(path, data, keep_going=True)
    found = list(positions.problems)
    if not isinstance(raw, dict):
        node = positions.node(())
        problems = [problem for _, problem in found]
        if not any(key == () for key, _ in found):  # an unreadable scalar says it all
            problems.append(
                Problem(node.value, "", "the manifest must be a mapping", "start with 'schema: 1'")
            )
        raise ManifestError(_in_order(path, problems, {}, 0))
    raw, unexpanded = expand_all(raw, env, positions)
    found += unexpanded
    spoilt = {key for key, _ in found if key is not None}
    try:
        doc: ManifestDoc | None = ManifestDoc.model_validate(raw)
        errors: list[Any] = []
    except ValidationError as exc:
        doc = None
        errors = [
            e
            for e in _unbranched(exc.errors(include_url=False))
            if not _under(tuple(e["loc"]), spoilt)
        ]
    problems = [problem for _, problem in found]
    schema_problems, unread = _problems(errors, positions)
    problems += schema_problems
    spoilt.update(tuple(e["loc"]) for e in errors)
    root = workspace_root(path.parent)
    resolved, groups = check_references(
        raw,
        root=root,
        base=path.parent,
        positions=positions,
        problems=problems,
        bad=lambda key: _under(key, spoilt),
    )
    if problems or doc is None:
        names = raw.get("binaries")
        anchors = (
            {
                dotted(key): positions.node(key).value
                for key in (("binaries", n, "requirements") for n in names)
            }
            if isinstance(names, dict)
            else {}
        )
        raise ManifestError(_in_order(path, problems, anchors, unread))
    _check_pythons(doc.project.python, positions, problems)
    binaries = {
        name: _binary(
            name,
            b,
            defaults=doc,
            root=root,
            base=path.parent,
            positions=positions,
            problems=problems,
            resolved=resolved[name],
        )
        for name, b in doc.binaries.items()
    }
    for name, binary in binaries.items():
        _outside_its_workspace(name, binary.source, root, positions, problems)
    if problems:  # those that hold across keys, found once the defaults are merged in
        raise ManifestError(_in_order(path, problems, {}, 0))
    pythons = tuple(doc.project.python)
    project = Project(
        doc.project.name,
        doc.project.version,
        pythons[0],
        pythons,
        doc.project.versioning,
        doc.project.tag_prefix,
    )
    return Manifest(
        path,
        root,
        project,
        types.MappingProxyType(binaries),
        types.MappingProxyType(groups),
        _tests(doc.tests),
    )


def _stage(doc: StageDoc | Literal[False]) -> StageEntry:
    if doc is False:
        return None
    services = None
    if doc.services is not None:
        services = tuple(
            Service(
                s.name,
                s.start,
                s.ready,
                parse_duration(s.timeout) if s.timeout is not None else 30.0,
                types.MappingProxyType(dict(s.env or {})),
            )
            for s in doc.services
        )
    return Stage(
        doc.command,
        tuple(doc.groups) if doc.groups is not None else None,
        types.MappingProxyType(dict(doc.env)) if doc.env is not None else None,
        parse_duration(doc.timeout) if doc.timeout is not None else None,
        services,
        tuple(doc.requirements) if doc.requirements is not None else None,
    )


def _tests(doc: TestsDoc | None) -> Tests:
    """The `tests:` section as settings (no section: no settings, the defaults rule)."""
    if doc is None:
        return Tests()
    projects: dict[str, Mapping[str, StageEntry] | None] = {}
    for name, stages in (doc.projects or {}).items():
        projects[name] = (
            None
            if stages is False
            else types.MappingProxyType({k: _stage(v) for k, v in stages.items()})
        )
    return Tests(
        types.MappingProxyType({k: _stage(v) for k, v in (doc.stages or {}).items()}),
        types.MappingProxyType(projects),
    )


def _under(key: KeyPath, spoilt: set[KeyPath]) -> bool:
    """Whether `key` is, or is inside, a value that has a problem already."""
    return any(key[:n] in spoilt for n in range(len(key) + 1))
