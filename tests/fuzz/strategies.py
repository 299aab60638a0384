"""Hypothesis strategies for binaries.yaml of the right shape, mutated.

`manifests()` draws a manifest of the right shape (values honest, hostile or random),
mutates its structure, dumps it as YAML in a random style and then edits the text.
Files built to hurt the YAML loader itself are in hostile.py. The values point into
the repository `make_repository` (test_manifest_fuzz.py) lays out.
"""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import strategies as st

__all__ = ["ENVIRONMENT", "HOSTILE", "UNSET", "manifests"]

# The environment the CLI runs with: references to these expand (or fail) the same
# way on every machine; SELF and the LOOPs refer to themselves, which must not loop.
ENVIRONMENT = {
    "A": "a",
    "EMPTY": "",
    "HUB": "127.0.0.1:5000/demo",
    "TAG": "v1",
    "SELF": "${SELF}",
    "LOOP1": "${LOOP2}",
    "LOOP2": "${LOOP1}",
    "NASTY": "x; rm -rf / $(id) `id`",
}
UNSET = ("UNSET", "VERSION", "GIT_SHA")

# What an attacker (or a fuzzer) tries in any string.
HOSTILE = (
    "x; rm -rf /",
    "$(id)",
    "`id`",
    "../x",
    "../../../../etc/passwd",
    "/",
    "a\nb",
    "a\r\nb",
    "\t",
    " ",
    "",
    "-rf",
    "--help",
    "A" * 129,
    "\x00",
    "\x1b[2J",
    "\x7f",
    "\x85",
    "\u2028",
    "\u202e",
    "\ufeff",
    "\ud800",
    "\U0010ffff",
    "${A}",
    "${A:-${A:-${A}}}",
    "${SELF}",
    "${LOOP1}",
    "${NASTY}",
    "${UNSET}",
    "$${A}",
    "${",
    "${}",
    "${A:=x}",
    "$" * 50,
    "*a",
    "&a",
    "<<",
    "!!python/object/apply:os.system",
    "true",
    "null",
    "1e999",
    "0x10",
    "2024-13-45",
    "1" * 5000,
    "https://ghcr.io/acme",
    "ghcr.io/Acme",
    "ghcr.io/acme/",
    "127.0.0.1:99999/x",
    "[::1]:5000/x",
    "oci-layout:",
    "x" * 3000,
    "a/" * 2000,
)
# Per field: values validation accepts (in the repository make_repository lays out),
# and values it must refuse.
_VALUES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "name": (("app", "lib", "x", "mesh-ctl", "a.b_c", "x" * 64), ("App", "-x", "x" * 65)),
    "source": (("app", "lib", "app/../lib", "${APP_DIR:-app}"), (".", "..", "loop", "out")),
    "entrypoint": (("app.main:main", "lib:run", "a.b.c:d.e"), ("app.main", ":main", "1x:m")),
    "outputs": (("wheel", "zipapp", "image"), ("whee", "Wheel")),
    "platforms": (("linux/amd64", "linux/arm64", "linux/arm/v7"), ("linux/mips", "linux")),
    "host": (("linux", "darwin", "windows"), ("linus", "Linux")),
    "hubs": (("127.0.0.1:5000/demo", "ghcr.io/acme", "localhost/x", "${HUB}"), ("registry",)),
    "tags": (("latest", "v1.2.3", "${TAG}", "${TAG:-edge}", "x" * 128), ("x" * 129, ".x")),
    "base": (("oci-layout:base", "ghcr.io/acme/py:3.11"), ("python:3.11", "ghcr.io/x@sha256:0")),
    "requirements": (("locks/good.txt",), ("locks/hostile.txt", "locks/none.txt", "/etc/passwd")),
    "dockerfile": (("Dockerfile",), ("../Dockerfile", "/etc/passwd")),
    "version": (("git", "1.0", "1.0.0rc1", "${VERSION:-0.0.0.dev0}"), ("not a version",)),
    "python": (("3.11", "3.12"), ("3", "3.1O")),
    "user": (("65532", "app:app", "root"), ("a b", "x:")),
    "workdir": (("/srv", "/"), ()),
    "shebang": (("/usr/bin/env python3", "/usr/bin/python3 -I"), ()),
    "env": (("LOG_LEVEL", "PATH"), ("1X", "A-B")),
    "label": (("team", "org.opencontainers.image.title"), ()),
    "smoke": (("--version", "--help"), ()),
}

_scalar: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)
)
# Any YAML value, two levels deep: enough to be the wrong type anywhere, and cheap
# to draw (a recursive strategy made generation slower than running the CLI).
junk: st.SearchStrategy[Any] = st.one_of(
    _scalar,
    st.sampled_from(HOSTILE),
    st.lists(_scalar, max_size=3),
    st.dictionaries(st.text(max_size=8), _scalar, max_size=3),
)


class _Shapes:
    """Strategies for each part of a manifest: `clean` ones draw only accepted values."""

    def __init__(self, clean: bool) -> None:
        self.clean = clean
        common = {
            "outputs": self.many("outputs"),
            "platforms": self.many("platforms"),
            "host": self.many("host"),
            "image": self.either(self.image()),
            "zipapp": self.either(self.zipapp()),
            "smoke": self.many("smoke"),
        }
        self.defaults = self.either(st.fixed_dictionaries({}, optional=common))
        self.binary = self.either(
            st.fixed_dictionaries(
                {"source": self.one("source"), "entrypoint": self.one("entrypoint")},
                optional={**common, "requirements": self.one("requirements")},
            )
        )
        self.project = self.either(
            st.fixed_dictionaries(
                {"name": self.one("name")},
                optional={"version": self.one("version"), "python": self.one("python")},
            )
        )

    def either(self, honest: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return honest if self.clean else honest | junk

    def key(self, field: str) -> st.SearchStrategy[str]:
        good, bad = _VALUES[field]
        if self.clean:
            return st.sampled_from(good)
        return st.sampled_from(good + bad + HOSTILE) | st.text(max_size=20)

    def one(self, field: str) -> st.SearchStrategy[Any]:
        return self.key(field) if self.clean else self.key(field) | junk

    def many(self, field: str) -> st.SearchStrategy[Any]:
        listed = st.lists(self.one(field), min_size=1, max_size=3)
        return listed if self.clean else listed | self.one(field)

    def image(self) -> st.SearchStrategy[dict[str, Any]]:
        return st.fixed_dictionaries(
            {},
            optional={
                "base": self.one("base"),
                "hubs": self.many("hubs"),
                "tags": self.many("tags"),
                "user": self.one("user"),
                "workdir": self.one("workdir"),
                "env": st.dictionaries(self.key("env"), self.one("label"), max_size=3),
                "labels": st.dictionaries(self.key("label"), self.one("label"), max_size=3),
                "dockerfile": self.one("dockerfile"),
            },
        )

    def zipapp(self) -> st.SearchStrategy[dict[str, Any]]:
        flag = st.booleans() if self.clean else st.booleans() | junk
        return st.fixed_dictionaries(
            {}, optional={"shebang": self.one("shebang"), "compress": flag, "compile": flag}
        )


_SHAPES = {clean: _Shapes(clean) for clean in (True, False)}


@st.composite
def _document(draw: st.DrawFn) -> dict[str, Any]:
    shapes = _SHAPES[draw(st.booleans())]
    names = draw(st.lists(shapes.key("name"), min_size=1, max_size=4, unique=True))
    doc: dict[str, Any] = {
        "schema": 1 if shapes.clean else draw(st.just(1) | junk),
        "project": draw(shapes.project),
        "binaries": {name: draw(shapes.binary) for name in names},
    }
    if draw(st.booleans()):
        doc["defaults"] = draw(shapes.defaults)
    with_groups = draw(st.booleans())
    if with_groups:
        members = st.lists(st.sampled_from([*names, "all", "nope", "g1", "g2"]), max_size=4)
        doc["groups"] = draw(st.dictionaries(st.sampled_from(["g1", "g2", *names]), members))
    return doc


def _mutate(draw: st.DrawFn, doc: dict[str, Any]) -> None:
    """Delete, replace or add one key somewhere in the document."""
    node: Any = doc
    while isinstance(node, dict) and node and draw(st.booleans()):
        child = node[draw(st.sampled_from(sorted(node, key=str)))]
        if not isinstance(child, dict):
            break
        node = child
    if not isinstance(node, dict):
        return
    action = draw(st.sampled_from(["delete", "replace", "add"]))
    if action != "add" and node:
        key = draw(st.sampled_from(sorted(node, key=str)))
        if action == "delete":
            del node[key]
        else:
            node[key] = draw(junk)
    else:
        node[draw(st.text(max_size=10) | st.sampled_from(HOSTILE))] = draw(junk)


def _dump(draw: st.DrawFn, doc: dict[str, Any]) -> str:
    style: dict[str, Any] = {
        "default_flow_style": draw(st.sampled_from([False, True, None])),
        "allow_unicode": draw(st.booleans()),
        "sort_keys": False,
        "width": draw(st.sampled_from([80, 1 << 20])),
    }
    try:  # libyaml's emitter is fast, but cannot write a lone surrogate
        return str(yaml.dump(doc, Dumper=yaml.CSafeDumper, **style))
    except UnicodeEncodeError:
        return str(yaml.safe_dump(doc, **style))


# Text edits that make YAML the dumper never writes: duplicate keys (a line twice),
# anchors and aliases, merge keys, tabs, CRLF, a second document, stray bytes.
_SNIPPETS = (
    b"&a ",
    b"*a",
    b"<<: *a\n",
    b"<<: [*a, *a]\n",
    b"\t",
    b"\r\n",
    b"---\n",
    b"...\n",
    b"%YAML 1.1\n",
    b"? ",
    b"!!binary ",
    b"!local ",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xef\xbb\xbf",
    b"\x00",
    b"\x1b",
    b"${",
    b"}",
    b"'",
    b'"',
    b"[",
    b"{",
    b"#",
)


def _edit(draw: st.DrawFn, data: bytes) -> bytes:
    lines = data.splitlines(keepends=True) or [b""]
    where = draw(st.integers(0, len(lines) - 1))
    edit = draw(st.sampled_from(["duplicate", "drop", "snippet", "truncate", "bytes"]))
    if edit == "duplicate":
        lines.insert(where, lines[where])
    elif edit == "drop":
        del lines[where]
    elif edit == "truncate":
        return data[: draw(st.integers(0, len(data)))]
    else:
        extra = draw(st.sampled_from(_SNIPPETS) if edit == "snippet" else st.binary(max_size=4))
        line = lines[where]
        at = draw(st.integers(0, len(line)))
        lines[where] = line[:at] + extra + line[at:]
    return b"".join(lines)


@st.composite
def manifests(draw: st.DrawFn) -> bytes:
    """A manifest of the right shape with random values, mutations and text edits."""
    doc = draw(_document())
    for _ in range(draw(st.integers(0, 3))):
        _mutate(draw, doc)
    data = _dump(draw, doc).encode("utf-8", "surrogatepass")
    for _ in range(draw(st.integers(0, 3))):
        data = _edit(draw, data)
    return data
