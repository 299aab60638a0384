"""Hypothesis strategies for files built to hurt a YAML loader, as bytes.

Random and non-UTF-8 bytes, byte-order marks, raw and escaped control characters,
alias and merge-key bombs ("billion laughs"), deep nesting, huge files, strings
and key counts, `${}` loops and floods, odd tags, directives and numbers. Most are
placed inside an otherwise valid manifest, so the loader reaches them.
"""

from __future__ import annotations

from hypothesis import strategies as st

__all__ = ["BASE", "hostile_files"]

BASE = (
    b"schema: 1\n"
    b"project: {name: demo, version: '1.0'}\n"
    b"binaries:\n"
    b"  app:\n"
    b"    source: app\n"
    b"    entrypoint: app.main:main\n"
    b"    outputs: [wheel, zipapp, image]\n"
    b"    image:\n"
    b"      labels:\n"
    b"        k: SLOT\n"
)
_MIB = 1 << 20


def _in_slot(value: bytes) -> bytes:
    return BASE.replace(b"SLOT", value)


def _at_top(block: bytes) -> bytes:
    return BASE + block


@st.composite
def _alias_bomb(draw: st.DrawFn) -> bytes:
    """Each level a list of `width` aliases of the one before: width**depth values."""
    depth, width = draw(st.integers(1, 12)), draw(st.integers(2, 12))
    lines = [b"l0: &l0 [lol, lol]"]
    for level in range(1, depth + 1):
        refs = b", ".join([b"*l%d" % (level - 1)] * width)
        lines.append(b"l%d: &l%d [%s]" % (level, level, refs))
    return _at_top(b"\n".join(lines) + b"\n")


@st.composite
def _merge_bomb(draw: st.DrawFn) -> bytes:
    depth, width = draw(st.integers(1, 10)), draw(st.integers(2, 12))
    node = b"&m0 {k0: 1, k1: 2}"
    for level in range(1, depth + 1):
        refs = b", ".join([b"*m%d" % (level - 1)] * width)
        node = b"&m%d {<<: [%s, %s]}" % (level, node, refs)
    return _at_top(b"x: " + node + b"\n")


@st.composite
def _nested(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(1, 5000))
    kind = draw(st.sampled_from(["flow-list", "flow-map", "block", "alias-self"]))
    if kind == "flow-list":
        return _in_slot(b"[" * depth + b"]" * depth)
    if kind == "flow-map":
        return _in_slot(b"{a: " * depth + b"1" + b"}" * depth)
    if kind == "block":
        depth = min(depth, 400)  # the file grows with the square of the depth
        return _at_top(b"".join(b"  " * i + b"a:\n" for i in range(depth)) + b"  " * depth + b"1\n")
    return _at_top(b"x: &a [*a, {k: *a}]\ny: *a\n")


@st.composite
def _huge(draw: st.DrawFn) -> bytes:
    size = draw(st.integers(1, _MIB + 16))
    kind = draw(st.sampled_from(["string", "key", "list", "keys", "lines", "file", "comment"]))
    if kind == "string":
        return _in_slot(b"'" + b"a" * size + b"'")
    if kind == "key":
        return _at_top(b"x" * min(size, _MIB) + b": 1\n")
    if kind == "list":
        count = min(size // 2, 40_000)
        return _in_slot(b"[" + b"1," * count + b"1]")
    if kind == "keys":
        count = min(size // 8, 30_000)
        return _at_top(b"".join(b"k%d: %d\n" % (i, i) for i in range(count)))
    if kind == "lines":
        return _at_top(b"\n" * size)
    if kind == "comment":
        return _at_top(b"# " + b"c" * size + b"\n")
    return BASE + b"#" * (_MIB + 1 - len(BASE) + draw(st.integers(0, 1000)))


_ESCAPES = (
    b"\\0",
    b"\\a",
    b"\\e",
    b"\\x1b[2J",
    b"\\x7f",
    b"\\x85",
    b"\\N",
    b"\\_",
    b"\\L",
    b"\\P",
    b"\\uD800",
    b"\\uDFFF",
    b"\\U0010FFFF",
    b"\\U00110000",
    b"\\u202E",
    b"\\uFEFF",
    b"\\",
)


@st.composite
def _characters(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["raw", "escape", "bom", "encoding"]))
    if kind == "raw":
        char = draw(st.integers(0, 0x10FFFF).filter(lambda c: not 0xD800 <= c <= 0xDFFF))
        encoded = chr(char).encode()
        data = BASE
        at = draw(st.integers(0, len(data)))
        return data[:at] + encoded + data[at:]
    if kind == "escape":
        escape = draw(st.sampled_from(_ESCAPES))
        return _in_slot(b'"a' + escape + b'b"')
    if kind == "bom":
        at = draw(st.sampled_from([0, 0, len(BASE) // 2, len(BASE)]))
        bom = draw(st.sampled_from([b"\xef\xbb\xbf", b"\xef\xbb\xbf\xef\xbb\xbf", b"\xff\xfe"]))
        return BASE[:at] + bom + BASE[at:]
    codec = draw(st.sampled_from(["utf-16", "utf-16-be", "utf-32", "latin-1", "cp1252"]))
    text = BASE.decode().replace("demo", "démo")
    return text.encode(codec)


@st.composite
def _expansion(draw: st.DrawFn) -> bytes:
    count = draw(st.integers(1, 20_000))
    unit = draw(
        st.sampled_from(
            [b"${", b"${A}", b"${UNSET}", b"$$", b"${A:-", b"${SELF}", b"${LOOP1}", b"${1}", b"$"]
        )
    )
    nested = b"${A:-" * min(count, 2000) + b"x" + b"}" * min(count, 2000)
    value = draw(st.sampled_from([unit * count, nested]))
    return _in_slot(b"'" + value.replace(b"'", b"''") + b"'")


_SCALARS = (
    b"1" * 5000,
    b"-0x" + b"f" * 5000,
    b"1e999",
    b"-.inf",
    b".nan",
    b"0o777",
    b"0b101",
    b"1:2:3",
    b"190:20:30.15",
    b"2024-13-45",
    b"2024-02-30 25:61:61",
    b"!!int x",
    b"!!bool maybe",
    b"!!float x",
    b"!!null x",
    b"!!binary '!!!'",
    b"!!timestamp x",
    b"!!set {a, b}",
    b"!!omap [a: 1]",
    b"!!python/name:os.system",
    b"!!python/object/apply:os.system [id]",
    b"!local x",
    b"!<tag:yaml.org,2002:str> x",
    b"!<!> x",
    b"*undefined",
    b"&a x",
    b"|\n          block\n",
    b">-\n          folded\n",
    b"? [a, b]",
    b"{[1]: 2}",
    b"{? {a: 1} : 2}",
    b"[a, b]: c",
)


@st.composite
def _scalars(draw: st.DrawFn) -> bytes:
    value = draw(st.sampled_from(_SCALARS))
    place = draw(st.sampled_from(["slot", "key", "version", "alias", "directive"]))
    if place == "slot":
        return _in_slot(value)
    if place == "alias":  # reached through an alias, the value has no position of its own
        first = value.split(b"\n")[0]
        return b"n: &n " + first + b"\n" + BASE.replace(b"'1.0'", b"*n").replace(b"SLOT", b"*n")
    if place == "key":
        return _at_top(value.split(b"\n")[0] + b": 1\n")
    if place == "version":
        return BASE.replace(b"'1.0'", value.split(b"\n")[0])
    return b"%YAML 1.1\n%TAG !e! tag:example.com,2000:\n---\n" + BASE + b"x: !e!y z\n"


def hostile_files() -> st.SearchStrategy[bytes]:
    """Bytes meant to crash, hang or exhaust the loader."""
    return st.one_of(
        st.binary(max_size=4096),
        st.binary(max_size=512).map(lambda junk: BASE + junk),
        _alias_bomb(),
        _merge_bomb(),
        _nested(),
        _huge(),
        _characters(),
        _expansion(),
        _scalars(),
    )
