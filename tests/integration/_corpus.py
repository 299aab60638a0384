"""The zipapp compatibility corpus: popular applications built as zipapps by shipyard's
library, and each run on the same command from a zipapp and from a virtualenv of the
same distributions on the same base interpreter."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

from shipyard.builders.wheel import WheelBuilder
from shipyard.builders.zipapp import ZipappBuilder, ZipappOptions
from shipyard.engine.plan import Action, Selection, make_plan
from shipyard.engine.planning import read_workspace
from shipyard.engine.run import wrapped
from shipyard.engine.scheduler import BuildContext, run_plan
from shipyard.manifest import load_manifest
from shipyard.stamp import read_stamp

__all__ = [
    "BASE_PYTHON",
    "Run",
    "Spec",
    "build_corpus",
    "differences",
    "distributions",
    "make_venv",
    "normalise",
    "render_table",
    "run_command",
    "run_env",
    "write_inputs",
    "write_project",
]

# The interpreter the virtualenvs are made from and the zipapps run with: the one under
# the tests' own virtualenv, so both sides run the same binary and standard library.
BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))
UV = Path(sys.prefix) / "bin" / "uv"
VERSION = "1.0.0"
# A source project's distribution name: left out of the virtualenv (it only carries the pins).
PREFIX = "corpus-"
PROJECT = """\
[build-system]
requires = ["hatchling>=1.21"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "{version}"
dependencies = {dependencies}

[tool.hatch.build.targets.wheel]
bypass-selection = true
"""


@dataclasses.dataclass(frozen=True)
class Spec:
    """One application of the corpus: how to build it, and the command that tries it."""

    binary: str  # also the console script's name: the zipapp's copy is named after it
    requirements: tuple[str, ...]  # exact pins
    entrypoint: str  # the application's own console-script function
    args: tuple[str, ...]
    files: Mapping[str, str] = dataclasses.field(default_factory=dict)  # inputs in the cwd
    stdin: str = ""
    expect: bytes = b""  # in the virtualenv's stdout+stderr: the command did its real work
    platforms: tuple[str, ...] = ("linux/amd64",)

    def command(self) -> str:
        """The command line, as a user would type it."""
        shown = [a if re.fullmatch(r"[\w@%+=:,./-]+", a) else repr(a) for a in self.args]
        line = " ".join((self.binary, *shown))
        return line + (" < stdin" if self.stdin else "")


@dataclasses.dataclass(frozen=True)
class Run:
    """What one command did: exit status and its two output streams, as bytes."""

    returncode: int
    stdout: bytes
    stderr: bytes


def write_project(root: Path, specs: tuple[Spec, ...]) -> None:
    """A manifest at `root` with one binary per spec, each from its own pinning project."""
    lines = ["schema: 1", f'project: {{name: corpus, version: "{VERSION}", python: "3.11"}}']
    lines.append("binaries:")
    for spec in specs:
        source = root / "apps" / spec.binary
        source.mkdir(parents=True)
        (source / "pyproject.toml").write_text(
            PROJECT.format(
                name=PREFIX + spec.binary,
                version=VERSION,
                dependencies=json.dumps(list(spec.requirements)),
            )
        )
        lines += [
            f"  {spec.binary}:",
            f"    source: apps/{spec.binary}",
            f"    entrypoint: {spec.entrypoint}",
            "    outputs: [wheel, zipapp]",
            f"    platforms: [{', '.join(spec.platforms)}]",
        ]
    (root / "binaries.yaml").write_text("\n".join(lines) + "\n")


def build_corpus(root: Path) -> dict[tuple[str, str], Path]:
    """Build every binary of `root`'s manifest in one plan: zipapp by (binary, platform),
    a universal archive listed under each of its platforms."""
    manifest = load_manifest(root / "binaries.yaml")
    stamp = read_stamp(root, manifest.project.version, os.environ)
    workspace = read_workspace(manifest)
    ctx = BuildContext(
        root, root / "dist", stamp, manifest.project.python, dict(os.environ), workspace=workspace
    )

    def options(action: Action) -> ZipappOptions:
        # The default mode: what a user gets without saying anything.
        return ZipappOptions(manifest.binaries[action.binaries[0]].entrypoint)

    plan = make_plan(manifest, Selection(binaries=tuple(manifest.binaries)), workspace=workspace)
    builders = {"wheel": wrapped(WheelBuilder()), "zipapp": wrapped(ZipappBuilder(options))}
    results = run_plan(plan, ctx, builders)
    failed = [(r.action.id, r.status, r.reason) for r in results if r.status != "built"]
    assert failed == [], failed
    built: dict[tuple[str, str], Path] = {}
    for result in results:
        for artifact in result.outputs:
            if artifact.kind != "zipapp":
                continue
            for installed in artifact.metadata.installed or ():
                built[(artifact.binary, installed.platform)] = artifact.path
    return built


def distributions(pyz: Path) -> dict[str, str]:
    """The distributions the archive resolved (its build info), by name."""
    with zipfile.ZipFile(pyz) as archive:
        info = json.loads(archive.read("_shipyard/build.json"))
    found: dict[str, str] = info["distributions"]
    return found


def make_venv(target: Path, dists: Mapping[str, str]) -> Path:
    """A virtualenv at `target` from BASE_PYTHON with exactly `dists` (the source projects,
    which only pin, left out); its bin folder."""
    subprocess.run(
        [str(UV), "venv", "-q", "--python", str(BASE_PYTHON), str(target)],
        check=True,
        capture_output=True,
    )
    pins = [f"{n}=={v}" for n, v in sorted(dists.items()) if not n.startswith(PREFIX)]
    python = str(target / "bin" / "python")
    done = subprocess.run(
        [str(UV), "pip", "install", "-q", "--no-deps", "--python", python, *pins],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return target / "bin"


def write_inputs(cwd: Path, spec: Spec) -> None:
    """Empty `cwd` and write the spec's input files: every run starts from the same files
    (no cache or bytecode a previous run left there)."""
    shutil.rmtree(cwd, ignore_errors=True)
    cwd.mkdir(parents=True)
    for name, text in spec.files.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_text(text)


def run_env(home: Path, cache: Path) -> dict[str, str]:
    """The environment of every run: this one, less what would point at another Python or
    another user's configuration, plus a fixed terminal, clock zone and zipapp cache."""
    dropped = {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("XDG_")}
    return env | {
        "HOME": str(home),
        "SHIPYARD_ZIPAPP_ROOT": str(cache),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "COLUMNS": "80",
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
        # No system time zone files: zoneinfo must find its zones in the tzdata package.
        "PYTHONTZPATH": str(home / "no-zoneinfo"),
    }


def run_command(argv: list[str], spec: Spec, cwd: Path, env: Mapping[str, str]) -> Run:
    """Run `argv` in a freshly written `cwd`."""
    write_inputs(cwd, spec)
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        input=spec.stdin.encode(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


# Only what legitimately differs between two runs of the same program.
_DURATION = re.compile(rb"\b(in|took) \d+(\.\d+)?s\b")


def normalise(data: bytes, paths: Mapping[Path, str]) -> tuple[bytes, set[str]]:
    """`data` with durations and the runs' own install folders replaced by placeholders,
    and which of the two were found."""
    used = set()
    data, count = _DURATION.subn(rb"\1 <duration>", data)
    if count:
        used.add("durations")
    for path, placeholder in paths.items():
        if str(path).encode() in data:
            used.add(f"{placeholder} path")
            data = data.replace(str(path).encode(), placeholder.encode())
    return data, used


def _text(data: bytes) -> list[str]:
    if data.startswith(b"\x89PNG"):  # binary output: compare digests, not lines
        return [f"<{len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}>\n"]
    return data.decode("utf-8", "replace").splitlines(keepends=True)


def differences(venv: Run, zipapp: Run, label: str) -> str:
    """A unified diff of the two runs ("" when they agree): exit status, stdout, stderr."""
    parts = []
    if venv.returncode != zipapp.returncode:
        parts.append(f"exit status: venv {venv.returncode}, {label} {zipapp.returncode}\n")
    for stream in ("stdout", "stderr"):
        left, right = getattr(venv, stream), getattr(zipapp, stream)
        if left != right:
            diff = difflib.unified_diff(
                _text(left), _text(right), f"venv {stream}", f"{label} {stream}"
            )
            parts.append("".join(diff))
    return "".join(parts)


def render_table(rows: list[tuple[str, str, str]]) -> str:
    """A Markdown table: application, command, same output as the venv."""
    header = ("application", "command", "same output as the venv")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]

    def line(cells: tuple[str, str, str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *map(line, rows)]) + "\n"
