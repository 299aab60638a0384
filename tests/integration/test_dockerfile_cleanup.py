"""A Dockerfile build leaves nothing behind in the Docker engine (issue 18, item 10).

Each platform was built as `shipyard-build/<binary>:<suffix>` and read back into
dist/images/, but the tag and the layers under it stayed in the engine after
every build, and a failed build left the images of the steps that had worked.
The Dockerfiles here carry a LABEL unique to the test, so every image the build
made (the steps' images inherit it) can be found in the engine whatever other
builds share it; after the build, success or failure, there must be none, and
the built layout must still run.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import docker
import pytest

from tests.integration._images import tarball
from tests.integration._repo import shipyard
from tests.integration.conftest import Services

pytestmark = [pytest.mark.integration, pytest.mark.requires("docker", "registry")]

BASE = "127.0.0.1:5000/shipyard/python-base:3.11"
INSTALL = """\
COPY .shipyard/wheels/ /tmp/wheels/
RUN python3 -c "import glob, zipfile; \
[zipfile.ZipFile(w).extractall('/opt/app/site') for w in glob.glob('/tmp/wheels/*.whl')]"
"""


def _repo(root: Path, binary: str, platforms: str, dockerfile: str) -> None:
    package = binary.replace("-", "_")
    (root / "app" / package).mkdir(parents=True)
    (root / "app" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        f'[project]\nname = "{binary}"\nversion = "1.0.0"\n'
        f'[tool.hatch.build.targets.wheel]\npackages = ["{package}"]\n'
    )
    (root / "app" / package / "__init__.py").write_text(
        "def main() -> int:\n    print('cleanup says hello')\n    return 0\n"
    )
    (root / "binaries.yaml").write_text(
        "schema: 1\n"
        f'project: {{name: {binary}, version: "1.0.0", python: "3.11"}}\n'
        "binaries:\n"
        f"  {binary}:\n"
        "    source: app\n"
        f'    entrypoint: "{package}:main"\n'
        "    outputs: [wheel, image]\n"
        f"    platforms: [{platforms}]\n"
        "    image: {dockerfile: Dockerfile}\n"
    )
    (root / "Dockerfile").write_text(dockerfile)
    (root / ".gitignore").write_text("/dist/\n")
    for git in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=t@t.invalid", "-c", "user.name=t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", "-C", str(root), *git], check=True, capture_output=True)


def _left_in_engine(client: docker.DockerClient, binary: str, label: str) -> list[str]:
    """The engine's images of this build: its tags, and any image carrying its label."""
    tagged = client.images.list(name=f"shipyard-build/{binary}", all=True)
    labelled = client.images.list(all=True, filters={"label": f"shipyard.test.cleanup={label}"})
    return sorted(
        {f"{image.short_id} {image.tags or '<untagged>'}" for image in [*tagged, *labelled]}
    )


def _unique() -> tuple[str, str]:
    label = uuid.uuid4().hex[:10]
    return f"dfclean-{label}", label


@pytest.mark.requires("qemu-aarch64")
def test_a_dockerfile_build_leaves_no_image_in_the_engine_and_its_layout_runs(
    tmp_path: Path, services: Services
) -> None:
    binary, label = _unique()
    root = tmp_path / "repo"
    _repo(
        root,
        binary,
        "linux/amd64, linux/arm64",
        f"FROM {BASE}\nLABEL shipyard.test.cleanup={label}\n{INSTALL}"
        "ENV PYTHONPATH=/opt/app/site\n"
        f'ENTRYPOINT ["python3", "-c", "import sys; from {binary.replace("-", "_")} '
        'import main; sys.exit(main())"]\n',
    )
    client = docker.DockerClient(base_url=services.docker_host)
    done = shipyard(
        root,
        "build",
        f"--binary={binary}",
        "--no-cache",
        DOCKER_HOST=services.docker_host,
        SHIPYARD_CACHE_DIR=str(tmp_path / "cache"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _left_in_engine(client, binary, label) == []
    # What the user reads back from the layout still runs, on each platform.
    layout = root / "dist" / "images" / binary
    for arch in ("amd64", "arm64"):
        archive = tarball(root / "dist", binary, f"linux/{arch}")
        assert archive.parent == layout.parent
        (image, *_) = client.images.load(archive.read_bytes())
        try:
            said = client.containers.run(
                image, [], network_mode="none", remove=True, platform=f"linux/{arch}"
            )
        finally:
            for tag in image.tags:
                client.images.remove(tag)
        assert said.decode().strip() == "cleanup says hello"


def test_a_failed_dockerfile_build_leaves_no_image_and_logs_its_steps(
    tmp_path: Path, services: Services
) -> None:
    binary, label = _unique()
    root = tmp_path / "repo"
    _repo(
        root,
        binary,
        "linux/amd64",
        f"FROM {BASE}\nLABEL shipyard.test.cleanup={label}\n{INSTALL}"
        "RUN echo 'the step before the failure' && exit 3\n",
    )
    client = docker.DockerClient(base_url=services.docker_host)
    done = shipyard(
        root,
        "build",
        f"--binary={binary}",
        "--no-cache",
        DOCKER_HOST=services.docker_host,
        SHIPYARD_CACHE_DIR=str(tmp_path / "cache"),
    )
    assert done.returncode != 0
    assert "docker build failed" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert _left_in_engine(client, binary, label) == []
    log = root / "dist" / "logs" / f"image-{binary}.log"
    assert str(log) in done.stderr  # the error names the log, which holds the steps
    assert "the step before the failure" in log.read_text()
