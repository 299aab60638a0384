"""Issue 17's compatibility corpus: ten popular applications, each built as a zipapp
and run on a real command, with the same exit status and output as the
same command from a virtualenv of the same distributions on the same interpreter."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
import zipfile
from pathlib import Path

import pytest

from tests.integration._corpus import (
    BASE_PYTHON,
    Run,
    Spec,
    build_corpus,
    differences,
    distributions,
    make_venv,
    normalise,
    render_table,
    run_command,
    run_env,
    write_inputs,
    write_project,
)
from tests.integration.conftest import Services
from tests.integration.test_zipapps import _arm64_digest

pytestmark = pytest.mark.integration

ARM64 = ("linux/amd64", "linux/arm64")
ICS = """\
BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//shipyard//corpus//EN
BEGIN:VEVENT
UID:corpus-1@shipyard.test
DTSTAMP:20250101T000000Z
DTSTART;TZID=America/New_York:20250310T090000
DTEND;TZID=America/New_York:20250310T103000
SUMMARY:Release review
ORGANIZER:mailto:lead@example.org
ATTENDEE:mailto:dev@example.org
LOCATION:Room 4
END:VEVENT
END:VCALENDAR
"""
CORPUS = (
    # Its plugins are entry points: inside a zip, importlib.metadata once saw no names.
    Spec(
        "http",
        ("httpie==3.2.4",),
        "httpie.__main__:main",
        (
            *("--offline", "--ignore-stdin", "--pretty=format"),
            *("POST", "http://127.0.0.1:8/items", "name=shipyard", "count:=3"),
        ),
        expect=b"User-Agent: HTTPie/3.2.4",
    ),
    # Reads its bundled default configuration next to __file__ with os.path.
    Spec(
        "yamllint",
        ("yamllint==1.35.1",),
        "yamllint.cli:run",
        ("bad.yaml",),
        files={"bad.yaml": "key: value  \nlist:\n- a\n-  b\nkey: again\n"},
        expect=b"duplication of key",
    ),
    # The `mocker` fixture exists only when pytest-mock is loaded through its entry point.
    Spec(
        "pytest",
        ("pytest==8.3.3", "pytest-mock==3.14.0"),
        "pytest:console_main",
        ("tests",),
        files={
            "tests/test_demo.py": (
                "import os\n\n\n"
                "def test_mocker_patches(mocker):\n"
                '    mocker.patch("os.getcwd", return_value="/patched")\n'
                '    assert os.getcwd() == "/patched"\n\n\n'
                "def test_fails():\n"
                "    assert [1, 2, 3] == [1, 2, 4]\n"
            )
        },
        expect=b"1 failed, 1 passed",
    ),
    # pyflakes and pycodestyle are plugins found through entry points.
    Spec(
        "flake8",
        ("flake8==7.1.1",),
        "flake8.main.cli:main",
        ("bad.py",),
        files={"bad.py": "import os\nx=1\ndef f( a ):\n    return undefined\n"},
        expect=b"F821 undefined name 'undefined'",
    ),
    # mypyc-compiled, and finds typeshed on disk next to its modules.
    Spec(
        "mypy",
        ("mypy==1.13.0",),
        "mypy.__main__:console_entry",
        ("--no-incremental", "--cache-dir=/dev/null", "bad.py"),
        files={"bad.py": 'def greet(name: str) -> str:\n    return "hi " + name\n\n\ngreet(3)\n'},
        expect=b'incompatible type "int"; expected "str"',
    ),
    Spec(
        "black",
        ("black==24.10.0",),
        "black:patched_main",
        ("-",),
        stdin="x=[1,2 ,3]\ndef f( a ):\n  return a\n",
        expect=b"x = [1, 2, 3]",
    ),
    # Its fonts are read with importlib.resources.files("pyfiglet.fonts") (pyfiglet/__init__.py).
    Spec(
        "pyfiglet",
        ("pyfiglet==1.0.2",),
        "pyfiglet:main",
        ("-f", "slant", "shipyard"),
        expect=b"/____/_/ /_/_/",
    ),
    # Pillow's auditwheel-repaired wheel: extension modules linked to pillow.libs/*.so.
    Spec(
        "qr",
        ("qrcode[pil]==8.0", "pillow==11.0.0"),
        "qrcode.console_scripts:main",
        ("--factory=pil", "https://example.org/shipyard"),
        expect=b"\x89PNG\r\n\x1a\n",
        platforms=ARM64,
    ),
    # jsonschema -> referencing -> rpds-py, a Rust extension (PyO3).
    Spec(
        "check-jsonschema",
        ("check-jsonschema==0.29.4",),
        "check_jsonschema:main",
        ("--schemafile", "schema.json", "doc.json"),
        files={
            "schema.json": '{"type": "object", "required": ["name"], "properties": '
            '{"name": {"type": "string"}, "port": {"type": "integer", "minimum": 1}}}',
            "doc.json": '{"port": "eighty"}',
        },
        expect=b"'eighty' is not of type 'integer'",
    ),
    # icalendar 6 looks zones up with zoneinfo; PYTHONTZPATH names no folder, so the
    # zones come from the tzdata package's files (importlib.resources). 13:00 UTC shows
    # the zone was found: an unknown TZID leaves the time floating, printed as 09:00.
    Spec(
        "icalendar",
        ("icalendar==6.0.1",),
        "icalendar.cli:main",
        ("event.ics",),
        files={"event.ics": ICS},
        expect=b"Starts     : Mon Mar 10 13:00:00 2025",
        platforms=ARM64,
    ),
)
SPECS = {spec.binary: spec for spec in CORPUS}
# The two run again on linux/arm64 under QEMU: a per-platform archive with native code,
# and a universal one.
ARM64_APPS = ("qr", "icalendar")


@dataclasses.dataclass(frozen=True)
class Corpus:
    """The built archives and, per application, each side's runs."""

    zipapps: dict[tuple[str, str], Path]
    venv_runs: dict[str, Run]
    diffs: dict[str, str]  # application -> diff against the venv ("" when the same)
    normalised: dict[str, set[str]]  # application -> what normalise() had to replace
    folder: Path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Build the corpus once (one plan, so the builds overlap), then run every command
    from its virtualenv and from its zipapp, cold then warm."""
    root = tmp_path_factory.mktemp("corpus")
    write_project(root / "project", CORPUS)
    started = time.monotonic()
    zipapps = build_corpus(root / "project")
    print(f"\nbuilt {len(set(zipapps.values()))} zipapps in {time.monotonic() - started:.1f} s")
    env = run_env(root / "home", root / "zipapps")
    (root / "home").mkdir()
    venv_runs: dict[str, Run] = {}
    diffs: dict[str, str] = {}
    normalised: dict[str, set[str]] = {}
    for spec in CORPUS:
        pyz = zipapps[(spec.binary, "linux/amd64")]
        bin_dir = make_venv(root / "venvs" / spec.binary, distributions(pyz))
        # As a user who drops the archive on PATH: argv[0] and prog names match.
        copy = root / "bin" / spec.binary
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(pyz, copy)
        cwd = root / "work"
        paths = {root / "venvs" / spec.binary: "<venv>", root / "zipapps": "<zipapp cache>"}
        venv, used = _normalised(
            run_command([str(bin_dir / spec.binary), *spec.args], spec, cwd, env), paths
        )
        assert spec.expect in venv.stdout + venv.stderr, (spec.binary, venv)
        venv_runs[spec.binary] = venv
        found = []
        for label in ("zipapp (cold)", "zipapp (warm)"):
            ran, also = _normalised(
                run_command([str(BASE_PYTHON), str(copy), *spec.args], spec, cwd, env), paths
            )
            used |= also
            found.append(differences(venv, ran, label))
        diffs[spec.binary] = "".join(found)
        normalised[spec.binary] = used
    return Corpus(zipapps, venv_runs, diffs, normalised, root)


def _normalised(run: Run, paths: dict[Path, str]) -> tuple[Run, set[str]]:
    stdout, out_used = normalise(run.stdout, paths)
    stderr, err_used = normalise(run.stderr, paths)
    return Run(run.returncode, stdout, stderr), out_used | err_used


def test_the_corpus_covers_what_issue_17_asks_for(corpus: Corpus) -> None:
    dists = {b: distributions(corpus.zipapps[(b, "linux/amd64")]) for b in SPECS}
    assert len(dists) >= 10
    assert "pytest-mock" in dists["pytest"]
    assert "rpds-py" in dists["check-jsonschema"]
    assert "tzdata" in dists["icalendar"]
    with zipfile.ZipFile(corpus.zipapps[("qr", "linux/amd64")]) as archive:
        vendored = [n for n in archive.namelist() if n.startswith("site/pillow.libs/")]
    assert any(".so" in n for n in vendored), "Pillow's wheel no longer vendors libraries"
    # Native code means one archive per platform; icalendar is pure, so one for both.
    qr = {corpus.zipapps[("qr", p)] for p in ARM64}
    ical = {corpus.zipapps[("icalendar", p)] for p in ARM64}
    assert (len(qr), len(ical)) == (2, 1)


def test_every_application_runs_from_its_zipapp_as_from_a_virtualenv(corpus: Corpus) -> None:
    rows = [(b, SPECS[b].command(), "no" if diff else "yes") for b, diff in corpus.diffs.items()]
    table = render_table(rows)
    notes = {b: ", ".join(sorted(n)) for b, n in corpus.normalised.items() if n}
    print("\n" + table + f"normalised: {notes or 'nothing'}")
    if target := os.environ.get("SHIPYARD_CORPUS_TABLE"):
        Path(target).write_text(table)
    failing = {b: d for b, d in corpus.diffs.items() if d}
    assert not failing, table + "\n".join(f"== {b}\n{d}" for b, d in failing.items())


@pytest.mark.requires("registry", "docker", "qemu-aarch64")
def test_two_archives_run_on_arm64_as_the_amd64_virtualenv(
    corpus: Corpus, services: Services
) -> None:
    import docker  # type: ignore[import-untyped, unused-ignore]

    folder = corpus.folder / "arm64"
    folder.mkdir()
    for binary in ARM64_APPS:
        shutil.copyfile(corpus.zipapps[(binary, "linux/arm64")], folder / binary)
    image = services.base_image.rpartition(":")[0] + "@" + _arm64_digest(services)
    client = docker.DockerClient(base_url=services.docker_host, timeout=600)
    env = {
        "SHIPYARD_ZIPAPP_ROOT": "/tmp/zipapps",
        "HOME": "/tmp",
        "NO_COLOR": "1",
        "TERM": "dumb",
        "COLUMNS": "80",
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
        "PYTHONTZPATH": "/nonexistent",
    }
    diffs = {}
    try:
        client.images.pull(image, platform="linux/arm64")
        for binary in ARM64_APPS:
            spec = SPECS[binary]
            inputs = corpus.folder / "arm64-work" / binary
            write_inputs(inputs, spec)
            out = corpus.folder / "arm64-out" / binary
            out.mkdir(parents=True)
            # The streams go to files: `docker logs` carries text, and would mangle a PNG.
            script = 'exec python3 "/app/$0" "$@" >/out/stdout 2>/out/stderr'
            container = client.containers.run(
                image,
                ["sh", "-c", script, binary, *spec.args],
                detach=True,
                network_mode="none",
                platform="linux/arm64",
                working_dir="/work",
                volumes={
                    str(folder): {"bind": "/app", "mode": "ro"},
                    str(inputs): {"bind": "/work", "mode": "ro"},
                    str(out): {"bind": "/out", "mode": "rw"},
                },
                environment=env,
            )
            try:
                status = int(container.wait(timeout=600)["StatusCode"])
            finally:
                container.remove(force=True)
            ran = Run(status, (out / "stdout").read_bytes(), (out / "stderr").read_bytes())
            diffs[binary] = differences(corpus.venv_runs[binary], ran, "arm64 zipapp")
    finally:
        client.close()
    rows = [(b, SPECS[b].command(), "no" if d else "yes") for b, d in diffs.items()]
    print("\nlinux/arm64 under QEMU, against the amd64 virtualenv:\n" + render_table(rows))
    assert not any(diffs.values()), "\n".join(f"== {b}\n{d}" for b, d in diffs.items() if d)
