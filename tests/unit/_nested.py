"""A repository laid out like the multi-language monorepos that hold a uv workspace in a
subfolder (issue 31): `docs/` and `dotnet/` beside `python/`, and `python/` the workspace,
with `binaries.yaml` and `uv.lock` in it.

What makes it hard, each on purpose:

- acme-cli 0.2.4 needs `acme-chat>=0.4.4,<0.5` while the workspace's acme-chat is 0.7.5
  (a stale upper bound between members, which uv ignores for workspace sources);
- the root's `[tool.uv]` constrains alpha and overrides gamma (beta needs gamma>=1; the
  index later has gamma 2.0);
- htmlish exists only as an sdist (pure Python, built by hatchling);
- greenlet is a native wheel whose extension needs libstdc++.so.6;
- every member declares a static version (0.7.5, 0.2.4, 0.0.1a1).
"""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.unit._workspaces import Index

__all__ = ["NATIVE", "greenlet_wheels", "htmlish_sdist", "nested_repo"]

NATIVE = "greenlet"
_EPOCH = 1_700_000_000


@pytest.fixture(scope="session")
def greenlet_wheels(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """greenlet's CPython 3.11 manylinux wheels for x86_64 and aarch64 (pip's download)."""
    folder = tmp_path_factory.mktemp("greenlet")
    for platform in ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64"):
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
             "--platform", platform, "--python-version", "3.11", "--implementation", "cp",
             "--no-input", "--disable-pip-version-check", "-q", "-d", str(folder),
             "greenlet==3.*"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.fail(f"pip download greenlet ({platform}) failed:\n{done.stderr}")
    return sorted(folder.glob("*.whl"))


def htmlish_sdist(folder: Path, version: str = "2024.2.26") -> Path:
    """A pure-Python sdist built by hatchling, the same bytes every time."""
    base = f"htmlish-{version}"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: htmlish\nVersion: {version}\n",
        "pyproject.toml": (
            f'[project]\nname = "htmlish"\nversion = "{version}"\n'
            'requires-python = ">=3.8"\n\n'
            '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        ),
        "htmlish/__init__.py": "def text(html):\n    return html.replace('<b>', '')\n",
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size, info.mtime, info.mode = len(data), _EPOCH, 0o644
            archive.addfile(info, io.BytesIO(data))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{base}.tar.gz"
    with path.open("wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed:
        packed.write(raw.getvalue())
    return path


_CLI = """\
import importlib.metadata as m

import acme_chat
import greenlet
import htmlish

NAMES = ("acme-chat", "acme-cli", "acme-core", "alpha", "beta", "gamma", "greenlet",
         "htmlish")


def main() -> int:
    glet = greenlet.greenlet(lambda: htmlish.text("<b>ok"))
    print(glet.switch(), acme_chat.NAME, " ".join(f"{n}=={m.version(n)}" for n in NAMES))
    return 0
"""


_BENCH = (
    "import acme_core\n\n\ndef main() -> int:\n    print('bench', acme_core.NAME)\n    return 0\n"
)


def _member(
    root: Path, folder: str, name: str, version: str, deps: list[str], **extra: str
) -> None:
    home = root / folder
    module = name.replace("-", "_")
    (home / "src" / module).mkdir(parents=True)
    (home / "src" / module / "__init__.py").write_text(extra.get("code", f"NAME = {name!r}\n"))
    listed = ", ".join(f'"{d}"' for d in deps)
    sources = "".join(
        f"{d.split('=')[0].split('>')[0].split('<')[0]} = {{ workspace = true }}\n"
        for d in deps
        if d.startswith("acme-")
    )
    scripts = f'[project.scripts]\nacme = "{module}:main"\n\n' if "code" in extra else ""
    (home / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "{version}"\nrequires-python = ">=3.11"\n'
        f"dependencies = [{listed}]\n\n{scripts}"
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["src/{module}"]\n\n'
        f"[tool.uv.sources]\n{sources}"
    )


def nested_repo(top: Path, index: Index, greenlet: list[Path]) -> Path:
    """The repository at `top` (made here, not committed); returns its `python/` folder.

    `index` gets htmlish's sdist and greenlet's wheels; call `uv lock` in the returned
    folder afterwards."""
    for wheel in greenlet:
        (index.wheels / wheel.name).write_bytes(wheel.read_bytes())
    htmlish_sdist(index.wheels)
    index.refresh()
    (top / "docs").mkdir(parents=True)
    (top / "docs" / "index.md").write_text("# Acme\n")
    (top / "dotnet" / "App").mkdir(parents=True)
    (top / "dotnet" / "App" / "App.csproj").write_text('<Project Sdk="Microsoft.NET.Sdk" />\n')
    (top / ".gitignore").write_text("dist/\n.venv/\n")
    root = top / "python"
    root.mkdir()
    (root / "pyproject.toml").write_text(
        '[project]\nname = "acme-workspace"\nversion = "0"\nrequires-python = ">=3.11"\n\n'
        '[dependency-groups]\ndev = ["delta"]\n\n'
        '[tool.uv]\npackage = false\nconstraint-dependencies = ["alpha<2"]\n'
        'override-dependencies = ["gamma==1.0"]\n\n'
        '[tool.uv.workspace]\nmembers = ["packages/*"]\n'
    )
    _member(root, "packages/core", "acme-core", "0.7.5", ["alpha", "beta"])
    _member(root, "packages/chat", "acme-chat", "0.7.5", ["acme-core==0.7.5", "htmlish<2025"])
    _member(root, "packages/cli", "acme-cli", "0.2.4", ["acme-chat>=0.4.4,<0.5", NATIVE], code=_CLI)
    _member(root, "packages/bench", "acme-bench", "0.0.1a1", ["acme-core"], code=_BENCH)
    return root
