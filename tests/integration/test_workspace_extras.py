"""Dependency confusion through extras, end to end through the CLI (security issue, item 4).

A uv workspace (members written by hand, no uv.lock) holds the library `acme-extra` and
projects that reach it in every way a requirement can: through the binary's own extra
(`plus = ["acme-extra"]`, binary `extras: [plus]`), through an extra naming its own
project (`all = ["acme-app[plus]"]`), through an extra asked of an in-repo library
(`acme-lib[x]`), plainly, and through a third-party package of the index that requires
it. The "index" (a find-links folder the installer searches, offline) also offers an
`acme-extra` 99.0: the attacker's copy, a higher version of the same name. Every zipapp
must ship the repository's copy or the build must refuse, and `affected` must name every
binary the library reaches when it changes. Build backends come from the installer's
cache, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shipyard.builders.zipapp import _boot as boot
from shipyard.builders.zipapp._boot.layout import BUILD_INFO
from tests.reliability import record
from tests.unit.builders.test_resolve import make_wheel

pytestmark = pytest.mark.integration

PLATFORM = "linux/arm64" if os.uname().machine in ("aarch64", "arm64") else "linux/amd64"
BACKEND = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
SOURCES = "\n[tool.uv.sources]\n" + "".join(
    f"{name} = {{ workspace = true }}\n" for name in ("acme-app", "acme-extra", "acme-lib")
)
# folder, name, dependencies, [project.optional-dependencies] lines
PROJECTS: tuple[tuple[str, str, list[str], str], ...] = (
    ("libs/extra", "acme-extra", [], ""),
    ("libs/lib", "acme-lib", [], 'x = ["acme-extra"]\n'),
    ("apps/app", "acme-app", [], 'plus = ["acme-extra"]\nall = ["acme-app[plus]"]\n'),
    ("apps/fast", "acme-fast", ["acme-lib[x]"], ""),
    ("apps/plain", "acme-plain", ["acme-extra"], ""),
    ("apps/third", "acme-third", ["thirdparty"], ""),
)
# binary -> (source, extras): the ways a requirement reaches acme-extra
SHIPPED = {
    "own-extra": ("apps/app", "[plus]"),
    "self-extra": ("apps/app", "[all]"),
    "library-extra": ("apps/fast", "[]"),
    "plain": ("apps/plain", "[]"),
}
THIRD_PARTY = "third-party"  # acme-third needs thirdparty, which needs acme-extra
MAIN = "import acme_extra\n\n\ndef main() -> None:\n    print(acme_extra.WHO)\n"


@dataclass
class Repo:
    root: Path
    env: dict[str, str]

    def run(self, *command: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command,
            cwd=cwd or self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    def shipyard(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "shipyard", *args)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _env(tmp: Path, links: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "GIT_"))}
    return {
        **env,
        "UV_OFFLINE": "1",  # the default index from the cache only (build backends)
        "PIP_NO_INDEX": "1",
        "UV_FIND_LINKS": str(links),  # where the attacker's acme-extra is offered
        "PIP_FIND_LINKS": str(links),
        "UV_NO_CONFIG": "1",
        "SHIPYARD_CACHE_DIR": str(tmp / "cache"),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t.invalid",
        "CI": "1",
    }


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Repo]:
    top = tmp_path_factory.mktemp("extras")
    links = top / "index"
    make_wheel(links, "acme_extra", "99.0", files={"acme_extra/__init__.py": "WHO = 'index'\n"})
    make_wheel(links, "thirdparty", "1.0", files={"thirdparty/__init__.py": ""},
               requires=["acme-extra"])  # fmt: skip
    root = top / "repo"
    _write(root / "pyproject.toml", '[tool.uv.workspace]\nmembers = ["apps/*", "libs/*"]\n')
    for folder, name, deps, extras in PROJECTS:
        listed = ", ".join(f'"{d}"' for d in deps)
        optional = f"\n[project.optional-dependencies]\n{extras}" if extras else ""
        _write(
            root / folder / "pyproject.toml",
            f'{BACKEND}[project]\nname = "{name}"\nversion = "0.1.0"\n'
            f'requires-python = ">=3.11"\ndependencies = [{listed}]\n{optional}{SOURCES}',
        )
        code = "WHO = 'repository'\n" if name == "acme-extra" else MAIN
        _write(root / folder / name.replace("-", "_") / "__init__.py", code)
    lines = ['schema: 1\nproject: {name: acme, version: "1.0.0", python: "3.11"}\nbinaries:\n']
    for binary, (source, extras) in [*SHIPPED.items(), (THIRD_PARTY, ("apps/third", "[]"))]:
        module = next(n for f, n, _, _ in PROJECTS if f == source).replace("-", "_")
        lines.append(
            f"  {binary}: {{source: {source}, entrypoint: '{module}:main', extras: {extras},"
            f" outputs: [zipapp], platforms: [{PLATFORM}]}}\n"
        )
    _write(root / "binaries.yaml", "".join(lines))
    _write(root / ".gitignore", "/dist/\n")
    made = Repo(root, _env(top, links))
    for git in (("init", "-q"), ("add", "-A"), ("commit", "-qm", "one")):
        assert made.run("git", *git).returncode == 0
    yield made
    shutil.rmtree(top, ignore_errors=True)


def _shipped(repo: Repo, binary: str) -> tuple[bytes, str, str]:
    """The acme_extra module a zipapp ships, its recorded version and what it prints."""
    (pyz,) = sorted((repo.root / "dist" / "zipapps").glob(f"{binary}-*.pyz"))
    with zipfile.ZipFile(pyz) as archive:
        module = archive.read("site/acme_extra/__init__.py")
        info = json.loads(archive.read(BUILD_INFO))
    env = {**repo.env, boot.ROOT_ENV: str(repo.root.parent / "unpacked" / binary)}
    ran = subprocess.run(
        [sys.executable, str(pyz)], env=env, capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    return module, info["distributions"].get("acme-extra", ""), ran.stdout


@pytest.mark.reliability
def test_every_path_to_an_in_repo_name_ships_the_repositorys_copy_or_refuses(
    repo: Repo,
) -> None:
    """Bug: the zipapps reaching acme-extra through an extra shipped the index's acme-extra
    99.0, one through a third-party package too, and editing the repository's acme-extra
    affected no binary that reached it through an extra."""
    built = repo.shipyard("build", *(f"--binary={b}" for b in SHIPPED))
    assert built.returncode == 0, built.stderr[-4000:]
    for binary in SHIPPED:
        assert _shipped(repo, binary) == (b"WHO = 'repository'\n", "0.1.0", "repository\n"), binary
    refused = repo.shipyard("build", f"--binary={THIRD_PARTY}")
    assert refused.returncode == 1, refused.stderr[-4000:]
    assert "`acme-extra` is a project of this repository (libs/extra)" in refused.stderr
    assert "reached through acme-third -> thirdparty -> acme-extra" in refused.stderr
    assert not list((repo.root / "dist" / "zipapps").glob(f"{THIRD_PARTY}-*"))

    _write(repo.root / "libs/extra/acme_extra/__init__.py", "WHO = 'repository, edited'\n")
    assert repo.run("git", "commit", "-qam", "edit the library").returncode == 0
    found = repo.shipyard("affected", "--since=HEAD~1")
    assert found.returncode == 0, found.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in found.stdout.splitlines())
    path = "libs/extra/acme_extra/__init__.py changed"
    assert lines == {
        "own-extra": f"{path} (through acme-extra)",
        "self-extra": f"{path} (through acme-extra)",
        "library-extra": f"{path} (through acme-lib -> acme-extra)",
        "plain": f"{path} (through acme-extra)",
    }
    record(
        "an in-repo name offered by the index",
        area="dependency confusion",
        cases=len(SHIPPED) + 1,
        injected="an index offering acme-extra 99.0 beside the repository's acme-extra "
        "0.1.0, reached by zipapps through the binary's extra, an extra naming its own "
        "project, an extra of an in-repo library, a plain dependency and a third-party "
        "package requiring it",
        result=f"{len(SHIPPED)}/{len(SHIPPED)} zipapps shipped and ran the repository's "
        "copy; the third-party path was refused with exit 1 naming the project and "
        f"the path; after an edit of acme-extra, `affected` named all {len(SHIPPED)} "
        "binaries that reach it",
        figures={"shipped_repository_copy": len(SHIPPED), "refused": 1, "index_copies": 0},
    )
