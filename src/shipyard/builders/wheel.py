"""Wheels: a PEP 517 build per source, normalised so the bytes depend only on inputs."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from shipyard import __version__, _toml
from shipyard._environ import VERSION
from shipyard._fs import publish_file, sha256_file
from shipyard.artifacts import Artifact, Distribution, Metadata
from shipyard.builders.kinds import stamp_inputs
from shipyard.dist import action_log, temp_prefix, wheel_file
from shipyard.engine.context import BuildContext
from shipyard.engine.keys import ActionKey, Inputs
from shipyard.engine.plan import Action
from shipyard.errors import BuildError, ShipyardError
from shipyard.files.sources import tree_hash
from shipyard.process import installer_env, run_logged
from shipyard.stamp import ZIP_EPOCH, Stamp

__all__ = [
    "BUILD_INFO",
    "VCS_BACKENDS",
    "WheelBuilder",
    "build_env",
    "build_info",
    "check_version",
    "normalize_wheel",
    "project_vcs_backend",
    "vcs_backend",
    "wheel_metadata",
]

# Written into the wheel's .dist-info; programs read it with importlib.metadata.
BUILD_INFO = "shipyard_build.json"


def build_info(stamp: Stamp) -> dict[str, object]:
    """The build identity stamped into every output: version, revision, dirty, time."""
    return {
        "version": stamp.version,
        "revision": stamp.revision,
        "dirty": stamp.dirty,
        "created": stamp.created,
    }


def build_env(ctx: BuildContext) -> dict[str, str]:
    """The environment of every build subprocess: the clock, the version, fixed hashing,
    none of shipyard's secrets (a backend or an installer is code from the repository or
    an index, and in a release the signing key and the registry and index passwords are
    in shipyard's own environment), and for uv and pip only the settings shipyard passes
    on purpose (`installer_env`)."""
    env = installer_env(ctx.env)
    env.update(
        SOURCE_DATE_EPOCH=str(ctx.stamp.epoch),
        PYTHONHASHSEED="0",
        **{VERSION.name: ctx.stamp.version},
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    # Version backends that read git give the version shipyard reports instead: each
    # through the override its documentation names (see VCS_BACKENDS).
    env.update(dict.fromkeys(_OVERRIDES, ctx.stamp.version))
    return env


VCS_BACKENDS = {
    "setuptools-scm": "SETUPTOOLS_SCM_PRETEND_VERSION",
    "hatch-vcs": "SETUPTOOLS_SCM_PRETEND_VERSION",
    "uv-dynamic-versioning": "UV_DYNAMIC_VERSIONING_BYPASS",
    "pdm-backend (scm)": "PDM_BUILD_SCM_VERSION",
    "poetry-dynamic-versioning": "POETRY_DYNAMIC_VERSIONING_BYPASS",
    "versioningit": "",
}
"""The version backends that derive a version from git, and the environment variable each
takes the version from instead (versioningit has none)."""
_OVERRIDES = sorted({name for name in VCS_BACKENDS.values() if name})


def vcs_backend(pyproject: Mapping[str, object]) -> str | None:
    """Which of `VCS_BACKENDS` makes this project's version from git, if one does (read
    from its pyproject.toml). None: the version is written in the repository (static, a
    file, a module attribute), which the wheel then carries as the project's own."""
    project = pyproject.get("project")
    if not isinstance(project, dict) or "version" not in (project.get("dynamic") or []):
        return None
    tool = pyproject.get("tool")
    tool = tool if isinstance(tool, dict) else {}
    system = pyproject.get("build-system")
    requires = system.get("requires", []) if isinstance(system, dict) else []
    wanted = " ".join(str(r).lower().replace("_", "-") for r in requires)
    hatch = tool.get("hatch", {}).get("version", {}) if isinstance(tool.get("hatch"), dict) else {}
    source = hatch.get("source") if isinstance(hatch, dict) else None
    pdm = tool.get("pdm", {}).get("version", {}) if isinstance(tool.get("pdm"), dict) else {}
    if source == "uv-dynamic-versioning" or "uv-dynamic-versioning" in tool:
        return "uv-dynamic-versioning"
    if source == "vcs":
        return "hatch-vcs"
    if isinstance(pdm, dict) and pdm.get("source") == "scm":
        return "pdm-backend (scm)"
    pdv = tool.get("poetry-dynamic-versioning")
    if isinstance(pdv, dict) and pdv.get("enable"):
        return "poetry-dynamic-versioning"
    if "versioningit" in tool or source == "versioningit":
        return "versioningit"
    if "setuptools_scm" in tool or "setuptools-scm" in tool or "setuptools-scm" in wanted:
        return "setuptools-scm"
    return None


def check_version(wheel: str, built: str, reported: str, backend: str | None) -> None:
    """Raise a BuildError when a wheel whose version comes from git (through `backend`)
    does not carry the version shipyard reports: the zipapp, image and release would
    name one version and ship another, and one key would give two wheels."""
    if backend is None or built == reported:
        return
    variable = VCS_BACKENDS.get(backend, "")
    how = (
        f"shipyard set {variable}={reported}; check that the backend's version plugin "
        "honours it (an old plugin may not)"
        if variable
        else f"{backend} has no override variable: tag the commit, or give the project "
        "a version the repository writes (a static [project].version or a version file)"
    )
    raise BuildError(
        f"wheel:{wheel}",
        f"the wheel's METADATA says version {built}, shipyard reports {reported} "
        f"(version from git by {backend}); {how}",
    )


def _zip_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(max(epoch, ZIP_EPOCH))
    return (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)


def _order(name: str) -> tuple[int, str]:
    # PEP 427 recommends .dist-info last so RECORD can be read at the end.
    parts = name.split("/", 1)
    in_dist_info = parts[0].endswith(".dist-info")
    is_record = in_dist_info and len(parts) > 1 and parts[1] == "RECORD"
    return (2 if is_record else 1 if in_dist_info else 0, name)


def _stamped(files: dict[str, tuple[bytes, bool]], info: Mapping[str, object]) -> None:
    """Add the build info file to the .dist-info, and its line to RECORD."""
    record = next((n for n in files if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)), None)
    if record is None:
        return
    path = record.rpartition("/")[0] + "/" + BUILD_INFO
    data = json.dumps(dict(info), indent=2, sort_keys=True).encode() + b"\n"
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines = [ln for ln in files[record][0].decode().splitlines() if not ln.startswith(path + ",")]
    at = next((i for i, ln in enumerate(lines) if ln.startswith(record + ",")), len(lines))
    lines.insert(at, f"{path},sha256={digest},{len(data)}")
    files[path] = (data, False)
    files[record] = ("".join(ln + "\n" for ln in lines).encode(), False)


def _check_name(wheel: Path, name: str) -> None:
    """Refuse an entry an installer could place outside its target folder."""
    parts = name.split("/")
    unsafe = (
        name.startswith("/")
        or "\\" in name
        or "\0" in name
        or re.match(r"[A-Za-z]:", name) is not None
        or any(part in ("", ".", "..") for part in parts)
    )
    if unsafe:
        raise ShipyardError(
            f"{wheel.name}: entry '{name}' is not a plain relative path; "
            "a wheel's files stay inside the folder it is installed into"
        )


def normalize_wheel(
    source: Path, target: Path, epoch: int, info: Mapping[str, object] | None = None
) -> None:
    """Rewrite a wheel with sorted entries, one timestamp and normalised modes.

    File contents are untouched, so RECORD stays valid: this makes any PEP 517
    backend's wheel reproducible, not only the backends that already are. With
    `info`, the build info is added to the .dist-info (and to RECORD).
    """
    import zipfile  # here, as in every function that reads or writes a wheel: not to key

    stamp = _zip_time(epoch)
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        files: dict[str, tuple[bytes, bool]] = {}
        for i in src.infolist():
            if i.is_dir():
                continue
            _check_name(source, i.filename)
            if i.filename in files:
                raise ShipyardError(f"{source.name}: '{i.filename}' appears twice in the wheel")
            # Modes become 0644/0755: a symlink entry stays a file, setuid bits go.
            files[i.filename] = (src.read(i), bool((i.external_attr >> 16) & 0o111))
        if info is not None:
            _stamped(files, info)
        for name in sorted(files, key=_order):
            data, executable = files[name]
            out = zipfile.ZipInfo(name, date_time=stamp)
            out.compress_type = zipfile.ZIP_DEFLATED
            out.create_system = 3  # unix, so the mode bits below are honoured
            out.external_attr = ((0o100755 if executable else 0o100644) & 0xFFFF) << 16
            dst.writestr(out, data, compresslevel=6)


class WheelBuilder:
    """Builds a source's wheel with `python -m build`, uv as installer when present."""

    kind = "wheel"

    def inputs(self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...]) -> Inputs:
        """Source files, version, clock, shipyard's version and the building Python.

        A source that no build may read (a symlink out of the repository, a pipe
        or device file) fails here, before the backend runs, as bad input (exit 2).
        """
        return {
            "shipyard": __version__,
            "source": tree_hash(
                action.source, exclude=action.nested, root=ctx.root, git=ctx.git, memo=ctx.digests
            ),
            "stamp": stamp_inputs(ctx),
            "python": "{}.{}".format(*sys.version_info[:2]),
        }

    def build(
        self, action: Action, ctx: BuildContext, deps: tuple[Artifact, ...], key: ActionKey
    ) -> tuple[Artifact, ...]:
        """Build, normalise and publish the wheel into dist/wheels/."""
        from zipfile import BadZipFile

        ctx.logs.mkdir(parents=True, exist_ok=True)
        log = action_log(ctx.dist, self.kind, action.names)
        with tempfile.TemporaryDirectory(prefix=temp_prefix("wheel"), dir=ctx.dist) as tmp:
            out = Path(tmp) / "out"
            # The backend's temporaries (and a front end's isolated environments) go
            # inside ours, so a killed build's leftovers are swept with it by the next.
            scratch = Path(tmp) / "tmp"
            scratch.mkdir()
            env = {**build_env(ctx), "TMPDIR": str(scratch)}
            command, returncode = self._backend(action, ctx, out, env, log)
            built = sorted(out.glob("*.whl")) if out.is_dir() else []
            if returncode != 0 or len(built) != 1:
                raise BuildError(
                    action.id,
                    f"the PEP 517 build failed (exit {returncode}): {_cause(log)}",
                    command=command,
                    log=log,
                )
            normalised = Path(tmp) / built[0].name
            try:
                normalize_wheel(built[0], normalised, ctx.stamp.epoch, build_info(ctx.stamp))
            except (ShipyardError, BadZipFile) as exc:
                raise ShipyardError(f"the PEP 517 backend's wheel: {exc}") from exc
            about = wheel_metadata(normalised)
            check_version(built[0].name, about[1].version, ctx.stamp.version, _backend(action))
            target = wheel_file(ctx.dist, built[0].name)
            publish_file(normalised, target)
        tags, own = about
        artifact = Artifact(
            "wheel",
            "",
            tags,
            target,
            sha256_file(target),
            target.stat().st_size,
            Metadata(wheel=own),
        )
        return (artifact,)

    def _backend(
        self, action: Action, ctx: BuildContext, out: Path, env: dict[str, str], log: Path
    ) -> tuple[list[str], int]:
        """Run the project's PEP 517 backend, its wheel into `out`: in the reused build
        environment of its requirements with uv (`shipyard.builders.backends`), else in
        a fresh isolated one by `python -m build`. The command and its exit status."""
        from shipyard.builders.backends import backend_spec, run_backend
        from shipyard.process import uv_binary

        uv = uv_binary()
        spec = None
        try:
            pyproject = _toml.loads((action.source / "pyproject.toml").read_text("utf-8"))
            spec = backend_spec(pyproject)
        except (OSError, UnicodeDecodeError, ValueError):
            pass  # no readable [build-system]: `build` says what is wrong with it
        if uv is not None and spec is not None:
            from shipyard.engine.cache.local import default_cache_dir

            cache = default_cache_dir(None, ctx.env)
            _, command, returncode = run_backend(
                spec, action.source, out, cache, uv=uv, env=ctx.env, build_env=env, log=log,
                action=action.id,
            )  # fmt: skip
            return command, returncode
        command = [sys.executable, "-m", "build", "--wheel"]
        if uv is not None or shutil.which("uv") or _has_module("uv"):
            command += ["--installer", "uv"]
        command += ["--outdir", str(out), str(action.source)]
        return command, run_logged(command, log, env=env, cwd=action.source)


def wheel_metadata(wheel: Path) -> tuple[str, Distribution]:
    """A wheel's sorted tags (`py3-none-any`) and its name and version, from its
    .dist-info (WHEEL and METADATA), not from its file name."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next((n for n in names if re.fullmatch(r"[^/]+\.dist-info/WHEEL", n)), None)
        meta = next((n for n in names if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        if info is None or meta is None:
            raise ShipyardError(f"{wheel.name}: no .dist-info/WHEEL or METADATA")
        wheel_text = archive.read(info).decode("utf-8", "replace")
        meta_text = archive.read(meta).decode("utf-8", "replace")
    tags = sorted(_header_values(wheel_text, "tag"))
    name = next(iter(_header_values(meta_text, "name")), "?")
    version = next(iter(_header_values(meta_text, "version")), "?")
    return ".".join(tags), Distribution(name, version)


def _header_values(text: str, key: str) -> list[str]:
    """The values of the email-style header `key` (case-insensitive) before the body."""
    found = []
    for line in text.splitlines():
        if not line.strip():
            break
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == key:
            found.append(value.strip())
    return found


def _cause(log: Path) -> str:
    """The most telling line of a failed build's log: the last exception or error."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line.split(":", 1)[0] or line.startswith("error:"):
            return line
    return lines[-1] if lines else "no output"


def project_vcs_backend(source: Path) -> str | None:
    """`vcs_backend` of the project in the folder `source` (None without a readable
    pyproject.toml)."""
    try:
        data = _toml.loads((source / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return vcs_backend(data)


def _backend(action: Action) -> str | None:
    return project_vcs_backend(action.source)


def _has_module(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None
