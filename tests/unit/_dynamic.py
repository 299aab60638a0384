"""uv workspaces shaped like real ones: members whose requirements a hatch metadata hook
writes (`dynamic = ["dependencies", "optional-dependencies"]`), extras that reach in-repo
libraries, an extra naming its own project. Built with hatchling from a file:// index
(hatchling's wheels are fetched once per session by pip, the package index's own client),
so uv and the PEP 517 backend both run offline in the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit._workspaces import Index, Uv, standard_index, uv_env

BACKEND = ("hatchling", "editables")


@pytest.fixture(scope="session")
def backend_wheels(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """hatchling and what it needs, as wheels (pip's own download, once a session)."""
    folder = tmp_path_factory.mktemp("backend-wheels")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-input",
         "--disable-pip-version-check", "-q", "-d", str(folder), *BACKEND],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"pip download {' '.join(BACKEND)} failed:\n{done.stderr}")
    return sorted(folder.glob("*.whl"))


def backend_index(folder: Path, wheels: list[Path]) -> Index:
    """The standard tiny index (alpha, beta, gamma, delta, epsilon) plus the backend."""
    index = standard_index(folder)
    for wheel in wheels:
        shutil.copy2(wheel, index.wheels / wheel.name)
    index.refresh()
    return index


_HOOK = """\
from hatchling.metadata.plugin.interface import MetadataHookInterface

DEPENDENCIES = {dependencies!r}
OPTIONAL = {optional!r}


class CustomMetadataHook(MetadataHookInterface):
    def update(self, metadata):
        metadata["dependencies"] = list(DEPENDENCIES)
        metadata["optional-dependencies"] = {{k: list(v) for k, v in OPTIONAL.items()}}
"""


def hooked_member(
    root: Path,
    folder: str,
    name: str,
    dependencies: list[str],
    optional: dict[str, list[str]] | None = None,
    *,
    sources: tuple[str, ...] = (),
    script: bool = True,
) -> Path:
    """A hatchling project whose dependencies and extras its `hatch_build.py` hook sets."""
    home = root / folder
    module = name.replace("-", "_")
    (home / "src" / module).mkdir(parents=True)
    (home / "src" / module / "__init__.py").write_text(
        "import sys\n\n\ndef main() -> int:\n    print('" + name + " runs')\n    return 0\n"
    )
    (home / "hatch_build.py").write_text(
        _HOOK.format(dependencies=dependencies, optional=optional or {})
    )
    listed = "".join(f"{s} = {{ workspace = true }}\n" for s in sources)
    scripts = f'[project.scripts]\n{name} = "{module}:main"\n' if script else ""
    (home / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
        'dynamic = ["dependencies", "optional-dependencies"]\n'
        f"{scripts}\n"
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        "[tool.hatch.metadata.hooks.custom]\n\n"
        f'[tool.hatch.build.targets.wheel]\npackages = ["src/{module}"]\n\n'
        f"[tool.uv.sources]\n{listed}"
    )
    return home


def static_member(root: Path, folder: str, name: str, dependencies: list[str]) -> Path:
    """A plain hatchling library with static requirements."""
    home = root / folder
    module = name.replace("-", "_")
    (home / "src" / module).mkdir(parents=True)
    (home / "src" / module / "__init__.py").write_text(f"NAME = {name!r}\n")
    listed = ", ".join(f'"{d}"' for d in dependencies)
    (home / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
        f"dependencies = [{listed}]\n\n"
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["src/{module}"]\n'
    )
    return home


def hooked_workspace(root: Path) -> Path:
    """A virtual root over `libs/*` and `apps/*`:

    - acme-core (static; needs alpha) and acme-evals (static; needs gamma), libraries;
    - acme-agent: its hook sets dependencies [acme-core, beta] and extras
      `evals` = [acme-evals] and `all` = [acme-agent[evals]] (an extra naming itself);
    - acme-cli: its hook sets dependencies [acme-agent[evals]]."""
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "acme"\nversion = "0"\nrequires-python = ">=3.11"\n\n'
        '[tool.uv]\npackage = false\n\n[tool.uv.workspace]\nmembers = ["libs/*", "apps/*"]\n'
    )
    static_member(root, "libs/core", "acme-core", ["alpha"])
    static_member(root, "libs/evals", "acme-evals", ["gamma"])
    hooked_member(
        root, "apps/agent", "acme-agent", ["acme-core", "beta"],
        {"evals": ["acme-evals"], "all": ["acme-agent[evals]"]},
        sources=("acme-core", "acme-evals"),
    )  # fmt: skip
    hooked_member(root, "apps/cli", "acme-cli", ["acme-agent[evals]"], sources=("acme-agent",))
    return root


_SERVER = (
    "import importlib.metadata as m\n\nimport acme_sdk\n\n\ndef version(name):\n"
    "    try:\n        return m.version(name)\n    except m.PackageNotFoundError:\n"
    "        return '-'\n\n\ndef main() -> int:\n"
    "    names = ('acme-sdk', 'alpha', 'beta', 'gamma')\n"
    "    print(acme_sdk.NAME, ' '.join(f'{n}=={version(n)}' for n in names))\n"
    "    return 0\n"
)


def sdk_workspace(root: Path) -> Path:
    """An SDK laid out as such repositories are: the root is the package `acme-sdk`
    (needs alpha; extra `cli` needs beta; extra `all` names the package itself with
    `cli`) and the workspace root; `examples/*` are members
    that depend on it (`server-a` plainly, `server-b` through `acme-sdk[cli]`). The root's
    `[tool.uv]` constrains alpha (`>=1.0`, not a pin) and overrides gamma (`==1.0`), which
    the lock encodes; nothing else may apply them again."""
    root.mkdir(parents=True)
    (root / "src" / "acme_sdk").mkdir(parents=True)
    (root / "src" / "acme_sdk" / "__init__.py").write_text("NAME = 'sdk'\n")
    (root / "pyproject.toml").write_text(
        '[project]\nname = "acme-sdk"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["alpha"]\n\n[project.optional-dependencies]\ncli = ["beta"]\n'
        'all = ["acme-sdk[cli]"]\n\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["src/acme_sdk"]\n\n'
        '[tool.uv]\nconstraint-dependencies = ["alpha>=1.0"]\n'
        'override-dependencies = ["gamma==1.0"]\n\n'
        '[tool.uv.workspace]\nmembers = ["examples/*"]\n'
    )
    for folder, name, requirement in (
        ("examples/server-a", "server-a", "acme-sdk"),
        ("examples/server-b", "server-b", "acme-sdk[cli]"),
    ):
        home = root / folder
        module = name.replace("-", "_")
        (home / module).mkdir(parents=True)
        (home / module / "__init__.py").write_text(_SERVER)
        (home / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\nversion = "1.0"\nrequires-python = ">=3.11"\n'
            f'dependencies = ["{requirement}"]\n\n'
            '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
            "[tool.uv.sources]\nacme-sdk = { workspace = true }\n"
        )
    return root


def git_commit(root: Path, message: str = "x") -> None:
    """Commit everything in `root` (a repository made on first use)."""
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t.invalid",
    }
    if not (root / ".git").exists():
        subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", message], check=True, env=env)


def offline(index: Index, cache: Path) -> dict[str, str]:
    """The environment uv and the backends get: offline, against `index` only."""
    return uv_env(index, cache)


__all__ = [
    "Uv",
    "backend_index",
    "backend_wheels",
    "git_commit",
    "hooked_member",
    "hooked_workspace",
    "offline",
    "sdk_workspace",
    "static_member",
]
