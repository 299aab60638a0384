"""Every path under dist/, in one place.

    dist/
      .lock                                  held for a whole build (builds take turns)
      .tmp-*                                 temporaries, swept by the next build
      wheels/<name>-<version>-<tags>.whl
      zipapps/<binary>-<version>[-<os>_<arch>].pyz
      images/<binary>/                       the image's OCI layout (index.json, blobs/)
      images/<binary>-<version>-<os>_<arch>.tar   a `docker load` tarball per platform
      logs/<kind>-<binaries>[-<os>_<arch>].log
      report.json, trace.json                the last build's report and trace
      release/<version>[.dry-run]/           a staged release:
        wheels/, zipapps/, images/<binary>/, sbom/<binary>.cdx.json

Builders write where these functions say; the cache restores only there
(`output_patterns`); nothing else spells these names. Readers (push, release)
find files through the artifacts a build reports, not by these names.
"""

from __future__ import annotations

import glob
from pathlib import Path

from shipyard._fs import TEMP_PREFIX

__all__ = [
    "TEMP_PREFIX",
    "action_log",
    "dist_dir",
    "image_archive",
    "image_layout",
    "lock_file",
    "logs_dir",
    "merged_results",
    "output_patterns",
    "platform_log",
    "release_dir",
    "report_file",
    "stage_result",
    "temp_prefix",
    "trace_file",
    "wheel_file",
    "zipapp_file",
]

DIST = "dist"


def _flat(platform: str) -> str:
    """`linux/arm64` as it appears in file names: `linux_arm64`."""
    return platform.replace("/", "_")


def dist_dir(root: Path) -> Path:
    """The output folder of the checkout at `root`."""
    return root / DIST


def lock_file(dist: Path) -> Path:
    """The lock a build holds for its whole run."""
    return dist / ".lock"


def temp_prefix(what: str = "") -> str:
    """The name prefix of a temporary under dist/ (swept after a killed build)."""
    return f"{TEMP_PREFIX}{what}-" if what else TEMP_PREFIX


def stamps_file(dist: Path) -> Path:
    """Each binary's last commit, remembered for the current HEAD (`engine.stamps.input_stamps`)."""
    return dist / ".stamps.json"


def source_digests_file(dist: Path) -> Path:
    """The source files' digests a build remembers by stat (`shipyard.files.statcache`)."""
    return dist / ".sources.json"


def outputs_file(dist: Path) -> Path:
    """Every action's outputs as the builds in this dist/ last wrote them, by action id."""
    return dist / ".outputs.json"


def lock_check_file(dist: Path) -> Path:
    """uv's last verdict on uv.lock, with the digest of what it read."""
    return dist / ".lock-check.json"


def metadata_inputs_file(dist: Path) -> Path:
    """The digests of the files of projects whose metadata their backend gives, by stat."""
    return dist / ".metadata-inputs.json"


def report_file(dist: Path) -> Path:
    """The last build's report."""
    return dist / "report.json"


def trace_file(dist: Path) -> Path:
    """The last build's trace (Chrome trace-event format)."""
    return dist / "trace.json"


def logs_dir(dist: Path) -> Path:
    """Where each action's log goes."""
    return dist / "logs"


def action_log(dist: Path, kind: str, binaries: tuple[str, ...]) -> Path:
    """The log of the `kind` action of `binaries`."""
    return logs_dir(dist) / f"{kind}-{'_'.join(binaries)}.log"


def platform_log(dist: Path, kind: str, binary: str, platform: str) -> Path:
    """The log of one platform's part of an action."""
    return logs_dir(dist) / f"{kind}-{binary}-{_flat(platform)}.log"


def stage_result(dist: Path, project: str, stage: str) -> Path:
    """The JUnit XML of one test stage of `project`."""
    return dist / "tests" / project / f"{stage}.xml"


def merged_results(dist: Path) -> Path:
    """The JUnit XML of every stage of the last `shipyard test`, merged, for CI test tabs."""
    return dist / "test-results.xml"


def wheel_file(dist: Path, name: str) -> Path:
    """A wheel, by the file name its PEP 517 backend chose."""
    return dist / "wheels" / name


def zipapp_file(dist: Path, binary: str, version: str, platform: str | None) -> Path:
    """A zipapp: universal when `platform` is None."""
    suffix = "" if platform is None else "-" + _flat(platform)
    return dist / "zipapps" / f"{binary}-{version}{suffix}.pyz"


def image_layout(dist: Path, binary: str) -> Path:
    """The OCI layout folder of `binary`'s image."""
    return dist / "images" / binary


def image_archive(dist: Path, binary: str, version: str, platform: str) -> Path:
    """The `docker load` tarball of one platform of `binary`'s image."""
    return dist / "images" / f"{binary}-{version}-{_flat(platform)}.tar"


def release_dir(dist: Path, version: str, *, dry_run: bool = False) -> Path:
    """Where a release of `version` is staged; a dry run stages beside it."""
    return dist / "release" / (version + (".dry-run" if dry_run else ""))


def output_patterns(kind: str, binary: str | None) -> tuple[tuple[str, ...], ...]:
    """Glob patterns (path parts under dist/; a last `**` matches one or more parts)
    of every file the `kind` action of `binary` may write: what a cache restore allows."""
    name = glob.escape(binary) if binary else "*"
    if kind == "test":  # `binary` is project/stage
        project, _, stage = (binary or "*/*").partition("/")
        return (("tests", glob.escape(project), f"{glob.escape(stage)}.xml"),)
    by_kind = {
        "wheel": (("wheels", "*.whl"),),
        "zipapp": (("zipapps", f"{name}-*.pyz"),),
        "image": (("images", name, "**"), ("images", f"{name}-*.tar")),
    }
    return by_kind.get(kind, (("**",),))
