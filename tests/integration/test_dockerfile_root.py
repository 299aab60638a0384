"""A Dockerfile at the repository root builds (issue 12, item 6).

The build context used to be copied into dist/.tmp-*/context, which lies inside
the context when the Dockerfile is at the root: the copy recursed ~150 levels
and ended in a raw shutil.Error. The context is now streamed as a tar that
leaves out dist/, .git/, .venv/, .nox/, .shipyard/ and what .dockerignore lists.
Built by the real Docker engine, run with `--network none`.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import time
from pathlib import Path

import docker
import pytest

from tests.integration._images import tarball
from tests.integration._repo import shipyard
from tests.integration.conftest import Services
from tests.reliability import record

pytestmark = [pytest.mark.integration, pytest.mark.requires("docker", "registry")]

BINARY = "rootctx"
SECRET = b"issue-12-secret-do-not-ship-7f3a"
MANIFEST = f"""\
schema: 1
project: {{name: rootctx, version: "1.2.3", python: "3.11"}}
binaries:
  {BINARY}:
    source: app
    entrypoint: "rootctx:main"
    outputs: [wheel, image]
    platforms: [linux/amd64]
    image: {{dockerfile: Dockerfile}}
"""
DOCKERFILE = """\
ARG BASE=127.0.0.1:5000/shipyard/python-base:3.11
FROM ${BASE}
COPY . /ctx/
RUN python3 -c "import glob, zipfile; \
[zipfile.ZipFile(w).extractall('/opt/app/site') for w in glob.glob('/ctx/.shipyard/wheels/*.whl')]"
ENV PYTHONPATH=/opt/app/site
ENTRYPOINT ["python3", "-c", "import sys; from rootctx import main; sys.exit(main())"]
"""
DOCKERIGNORE = """\
# secrets never go to the engine
secret.txt
**/*.log
!keep.log
/rootonly.txt
# dist/ stays out whatever an exception says
!dist/junk
"""


def _repo(root: Path) -> None:
    (root / "app" / "rootctx").mkdir(parents=True)
    (root / "app" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "rootctx"\nversion = "1.2.3"\n'
    )
    (root / "app" / "rootctx" / "__init__.py").write_text(
        "def main() -> int:\n    print('rootctx says hello')\n    return 0\n"
    )
    (root / "binaries.yaml").write_text(MANIFEST)
    (root / "Dockerfile").write_text(DOCKERFILE)
    (root / ".dockerignore").write_text(DOCKERIGNORE)
    (root / ".gitignore").write_text("/dist/\n/.venv/\n/.nox/\n")
    (root / "secret.txt").write_bytes(SECRET)
    (root / "debug.log").write_text("log\n")
    (root / "keep.log").write_text("kept\n")
    (root / "rootonly.txt").write_text("root only\n")
    (root / "docs").mkdir()
    (root / "docs" / "rootonly.txt").write_text("nested, kept\n")
    (root / "docs" / "trace.log").write_text("log\n")
    for git in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=t@t.invalid", "-c", "user.name=t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", "-C", str(root), *git], check=True, capture_output=True)
    # Junk no build should read: a deep dist/ (with a stale context and a loop), a venv.
    deep = root / "dist" / ".tmp-old" / "context" / "dist" / ".tmp-old" / "context"
    deep.mkdir(parents=True)
    (deep / "secret.txt").write_bytes(SECRET)
    (root / "dist" / "junk").write_bytes(os.urandom(1 << 20))
    (root / "dist" / "loop").symlink_to(".")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").write_text("not a python\n")
    (root / ".nox" / "tests").mkdir(parents=True)


def _blobs_hold(layout: Path, data: bytes) -> bool:
    for blob in (layout / "blobs" / "sha256").iterdir():
        raw = blob.read_bytes()
        if data in (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw):
            return True
    return False


@pytest.mark.reliability
def test_a_dockerfile_at_the_repository_root_builds_without_dist_git_or_ignored_files(
    tmp_path: Path, services: Services
) -> None:
    root = tmp_path / "repo"
    _repo(root)
    started = time.monotonic()
    done = shipyard(
        root,
        "build",
        f"--binary={BINARY}",
        "--no-cache",
        DOCKER_HOST=services.docker_host,
        SHIPYARD_CACHE_DIR=str(tmp_path / "cache"),
    )
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    layout = root / "dist" / "images" / BINARY
    archive = tarball(root / "dist", BINARY, "linux/amd64")
    assert archive.parent == layout.parent
    client = docker.DockerClient(base_url=services.docker_host)
    (image, *_) = client.images.load(archive.read_bytes())
    said = client.containers.run(image, [], network_mode="none", remove=True)
    assert said.decode().strip() == "rootctx says hello"
    listing = client.containers.run(
        image,
        [],
        entrypoint=[
            "python3",
            "-c",
            "import json, os; print(json.dumps(sorted(os.path.relpath(os.path.join(d, n), "
            "'/ctx') for d, ds, fs in os.walk('/ctx') for n in ds + fs)))",
        ],
        network_mode="none",
        remove=True,
    )
    sent = set(json.loads(listing.decode()))
    wheels = [n for n in sent if n.startswith(".shipyard/wheels/") and n.endswith(".whl")]
    expected = {"Dockerfile", ".dockerignore", "keep.log", "docs/rootonly.txt", "app"}
    left_out = {"secret.txt", "debug.log", "rootonly.txt", "docs/trace.log", "dist", ".git"}
    left_out |= {".venv", ".nox"}
    problems = [f"missing from the context: {n}" for n in sorted(expected - sent)]
    problems += [f"sent though excluded: {n}" for n in sorted(left_out & sent)]
    if len(wheels) != 1:
        problems.append(f"expected the binary's wheel under .shipyard/wheels/: {wheels}")
    if _blobs_hold(layout, SECRET):
        problems.append("the ignored secret's bytes are in a layer of the image")
    record(
        "a Dockerfile at the repository root",
        area="build context",
        cases=len(expected) + len(left_out) + 1,
        injected="`shipyard build` of a binary whose Dockerfile is at the repository root, "
        "with a deep dist/ (a stale context, a symlink loop, 1 MiB of junk), .git/, .venv/, "
        ".nox/ and a .dockerignore excluding a secret file, *.log at any depth (one "
        "re-included with !), a root-only /path, and trying to re-include dist/ with !",
        result=f"built by the Docker engine in {seconds:.1f}s and ran with --network none; "
        f"{len(left_out)} excluded paths absent from the context, {len(expected)} kept ones "
        f"present, the secret in no layer; {len(problems)} problems",
        figures={"seconds": round(seconds, 1), "failures": len(problems)},
    )
    assert not problems, "\n".join(problems)
