"""Promotion's local half: what it copies where, decided from release.json and the manifest.

The copying itself runs against real registries in tests/integration/test_promote.py;
here: the final hubs (image.hubs as expanded now, minus the staging hub; --to),
the order tags move, protected hubs, a damaged or missing staged release, the
CLI's exit codes, the `invoke promote` task (its `--from`, a Python keyword), and
that promotion never loads the build engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shipyard.cli import main, parser
from shipyard.cli.tasks import ns
from shipyard.errors import ShipyardError, UsageError
from shipyard.manifest import Manifest, load_manifest
from shipyard.oci.remote.attach import attached_tag
from shipyard.release.attachments import PLATFORM_NOTE, attachment
from shipyard.release.keys import generate_keypair, load_signing_key, sign_sums
from shipyard.release.promote import (
    PromoteOptions,
    PromotionError,
    check_signing_key,
    plan_promotion,
    promote,
)
from shipyard.release.provenance import (
    SLSA_PREDICATE,
    STATEMENT_TYPE,
    expected_subjects,
    write_provenance,
)
from shipyard.release.staged import parse_release
from tests.unit.cli.test_tasks import shipyard_argv

REPO = Path(__file__).resolve().parents[3]
STAGING = "127.0.0.1:5000/staging"
CHILDREN = ["sha256:" + "2" * 64, "sha256:" + "3" * 64]


def index_blob(note: str = "") -> bytes:
    """An image index naming CHILDREN (`note` makes another one)."""
    manifests = [{"digest": child} for child in CHILDREN]
    return json.dumps({"schemaVersion": 2, "manifests": manifests, "note": note}).encode()


DIGEST = "sha256:" + hashlib.sha256(index_blob()).hexdigest()

MANIFEST = """\
schema: 1
project: {name: demo, version: "1.0.0", python: "3.11"}
defaults:
  outputs: [wheel, image]
  image:
    hubs: ["${HUB:-127.0.0.2:5000/final}", "127.0.0.3:5000/mirror"]
    tags: [latest, stable]
binaries:
  app:
    source: app
    entrypoint: app.main:main
    image:
      protected: [127.0.0.3:5000/mirror]
"""


def make_repo(root: Path, manifest: str = MANIFEST) -> Path:
    """A manifest, its one source, and a staged release 1.0.0 of it; the manifest's path."""
    (root / "app").mkdir(parents=True)
    (root / "app" / "pyproject.toml").write_text('[project]\nname = "app"\nversion = "1.0.0"\n')
    (root / "binaries.yaml").write_text(manifest)
    folder = root / "dist" / "release" / "1.0.0"
    wheel = folder / "wheels" / "app-1.0.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"a wheel")
    write_layout(folder, "images/app", index_blob())
    write_staged(
        folder,
        [
            {
                "kind": "wheel",
                "path": "wheels/app-1.0.0-py3-none-any.whl",
                "sha256": hashlib.sha256(b"a wheel").hexdigest(),
            },
            {
                "kind": "image",
                "binary": "app",
                "path": "images/app",
                "digest": DIGEST,
                "manifests": [{"platform": "linux/amd64", "digest": d} for d in CHILDREN],
                "hubs": [STAGING],
                "tags": ["1.0.0", "latest", "stable"],
            },
        ],
    )
    return root / "binaries.yaml"


def write_layout(folder: Path, rel: str, blob: bytes) -> str:
    """An image layout at `folder/rel` whose index.json names `blob`; its digest."""
    digest = hashlib.sha256(blob).hexdigest()
    blobs = folder / rel / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    (blobs / digest).write_bytes(blob)
    (folder / rel / "index.json").write_text(
        json.dumps({"manifests": [{"digest": f"sha256:{digest}"}]})
    )
    return f"sha256:{digest}"


def resum(folder: Path) -> None:
    """Write SHA256SUMS over the folder as staging does (not the sums, .sig, journal)."""
    skip = {"SHA256SUMS", "SHA256SUMS.sig", "publish.journal"}
    lines = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(folder).as_posix()}\n"
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.relative_to(folder).as_posix() not in skip
    ]
    (folder / "SHA256SUMS").write_text("".join(lines))


def write_staged(folder: Path, artifacts: list[dict[str, Any]], **top: Any) -> None:
    """release.json of `artifacts`, and SHA256SUMS over the folder: a consistent release."""
    staged = {"schema": 1, "version": "1.0.0", "snapshot": False, "artifacts": artifacts, **top}
    (folder / "release.json").write_text(json.dumps(staged))
    resum(folder)


def manifest_at(path: Path, **env: str) -> Manifest:
    return load_manifest(path, {k: v for k, v in os.environ.items() if k != "HUB"} | env)


def plan(path: Path, env: dict[str, str] | None = None, **options: Any) -> Any:
    settings = {"source": STAGING, "version": "1.0.0", "force_protected": True, **options}
    return plan_promotion(manifest_at(path, **(env or {})), PromoteOptions(**settings), {})


def test_final_hubs_are_image_hubs_as_expanded_now_minus_the_staging_hub(tmp_path: Path) -> None:
    path = make_repo(tmp_path)
    promotion = plan(path)  # HUB unset: its default
    assert [str(i.target) for i in promotion.images] == [
        "127.0.0.2:5000/final",
        "127.0.0.3:5000/mirror",
    ]
    image = promotion.images[0]
    assert (image.binary, image.digest, image.manifests) == ("app", DIGEST, tuple(CHILDREN))
    assert image.source_repo == "staging/app" and image.target_repo == "final/app"
    assert not image.same_registry
    assert image.layout == tmp_path / "dist" / "release" / "1.0.0" / "images" / "app"
    # HUB pointing at the staging hub: the staging hub is left out, the mirror stays.
    promotion = plan(path, {"HUB": STAGING})
    assert [str(i.target) for i in promotion.images] == ["127.0.0.3:5000/mirror"]
    assert [w.name for w in promotion.wheels] == ["app-1.0.0-py3-none-any.whl"]


def test_a_final_hub_on_the_staging_registry_mounts(tmp_path: Path) -> None:
    path = make_repo(tmp_path)
    promotion = plan(path, to=("127.0.0.1:5000/official",))
    (image,) = promotion.images
    assert image.same_registry and image.target_repo == "official/app"


def test_to_overrides_the_manifest_and_may_not_name_the_staging_hub(tmp_path: Path) -> None:
    path = make_repo(tmp_path)
    promotion = plan(path, to=("127.0.0.9:5000/a", "127.0.0.9:5000/b/"))
    assert [str(i.target) for i in promotion.images] == ["127.0.0.9:5000/a", "127.0.0.9:5000/b"]
    with pytest.raises(UsageError, match=r"--to 127\.0\.0\.1:5000/staging is the staging hub"):
        plan(path, to=(STAGING + "/",))


def test_no_final_hub_left_names_the_variable_and_the_fix(tmp_path: Path) -> None:
    path = make_repo(
        tmp_path,
        MANIFEST.replace(', "127.0.0.3:5000/mirror"', "").replace(
            "      protected: [127.0.0.3:5000/mirror]\n", "      user: '1'\n"
        ),
    )
    with pytest.raises(UsageError, match=r"expands to only the staging hub .*HUB.* --to HUB"):
        plan(path, {"HUB": STAGING})


def test_tags_move_version_first_on_every_hub_then_the_rest(tmp_path: Path) -> None:
    promotion = plan(make_repo(tmp_path))
    order = [(str(i.target), tag) for i, tag in promotion.tag_order()]
    assert order == [
        ("127.0.0.2:5000/final", "1.0.0"),
        ("127.0.0.3:5000/mirror", "1.0.0"),
        ("127.0.0.2:5000/final", "latest"),
        ("127.0.0.3:5000/mirror", "latest"),
        ("127.0.0.2:5000/final", "stable"),
        ("127.0.0.3:5000/mirror", "stable"),
    ]


def test_a_protected_hub_needs_ci_or_force(tmp_path: Path) -> None:
    """The publish rails' own check (rails.check_protected), on the final hubs."""
    path = make_repo(tmp_path)
    options = PromoteOptions(STAGING, "1.0.0")
    refused = (
        r"app -> 127\.0\.0\.3:5000/mirror: protected hub .*--force-protected to `shipyard promote`"
    )
    with pytest.raises(UsageError, match=refused):
        plan_promotion(manifest_at(path), options, {})
    with pytest.raises(UsageError, match=refused):
        plan_promotion(manifest_at(path), options, {"CI": "  "})  # set but empty: not CI
    assert len(plan_promotion(manifest_at(path), options, {"CI": "true"}).images) == 2
    forced = PromoteOptions(STAGING, "1.0.0", force_protected=True)
    assert len(plan_promotion(manifest_at(path), forced, {}).images) == 2
    # --to naming the protected hub (spelt differently) is refused the same way.
    to = PromoteOptions(STAGING, "1.0.0", to=("127.0.0.3:5000/mirror/",))
    with pytest.raises(UsageError, match=refused):
        plan_promotion(manifest_at(path), to, {})
    # A hub that is not a final hub of this promotion is no reason to refuse.
    elsewhere = PromoteOptions(STAGING, "1.0.0", to=("127.0.0.9:5000/x",))
    assert len(plan_promotion(manifest_at(path), elsewhere, {}).images) == 1
    # A dry run sends nothing: it notes what a real run would refuse.
    dry = plan_promotion(manifest_at(path), PromoteOptions(STAGING, "1.0.0", dry_run=True), {})
    assert dry.notes == (
        "note: app -> 127.0.0.3:5000/mirror is a protected hub: a promotion outside CI "
        "stops here without --force-protected",
    )


def test_the_rails_see_each_binary_with_its_final_hubs(tmp_path: Path) -> None:
    promotion = plan(make_repo(tmp_path), {"HUB": STAGING})
    app = promotion.binaries["app"]
    assert app.image.hubs == ("127.0.0.3:5000/mirror",)  # the staging hub left out
    assert app.image.protected == ("127.0.0.3:5000/mirror",)
    assert app.image.movable_tags == ("latest",)


def test_a_variant_is_copied_with_its_own_tags_and_movable_tags(tmp_path: Path) -> None:
    path = make_repo(tmp_path, MANIFEST.replace("tags: [latest, stable]", "tags: [latest]"))
    folder = tmp_path / "dist" / "release" / "1.0.0"
    staged = json.loads((folder / "release.json").read_text())
    default = staged["artifacts"][1] | {"tags": ["1.0.0", "latest"]}
    debug = default | {
        "path": "images/app/variants/debug",
        "digest": write_layout(folder, "images/app/variants/debug", index_blob("debug")),
        "tags": ["1.0.0-debug", "latest-debug"],
        "variant": "debug",
        "collapsed": False,
    }
    write_staged(folder, [staged["artifacts"][0], default, debug])
    promotion = plan(path, to=("127.0.0.9:5000/final",))
    by_variant = {i.variant: i for i in promotion.images}
    assert by_variant[""].movable == ("latest",)
    assert by_variant["debug"].movable == ("latest-debug",)
    assert by_variant["debug"].layout == folder / "images" / "app" / "variants" / "debug"
    # The version tags (the default's and the variant's) move before any other tag.
    assert [tag for _, tag in promotion.tag_order()] == [
        "1.0.0",
        "1.0.0-debug",
        "latest",
        "latest-debug",
    ]


def test_a_changed_wheel_is_refused_before_anything(tmp_path: Path) -> None:
    """The folder passes the check `verify` runs before promotion plans anything (exit 1)."""
    path = make_repo(tmp_path)
    (tmp_path / "dist/release/1.0.0/wheels/app-1.0.0-py3-none-any.whl").write_bytes(b"other")
    with pytest.raises(PromotionError, match=r"app-1\.0\.0-py3-none-any\.whl has sha256") as caught:
        plan(path)
    assert caught.value.exit_code == 1 and "nothing was promoted" in str(caught.value)


@pytest.mark.parametrize(
    ("change", "message", "code"),
    [
        ({"snapshot": True}, r"is a snapshot", 2),
        ({"version": "2.0.0"}, r"is the release of 2\.0\.0, not 1\.0\.0", 1),
        ({"artifacts": [{"kind": "wheel", "path": "../x.whl"}]}, r"the path '\.\./x\.whl'", 1),
        (
            {
                "artifacts": [
                    {"kind": "image", "binary": "app", "digest": DIGEST, "path": "images/app"}
                ]
            },
            r"no tags",
            2,
        ),
        ({"artifacts": []}, r"lists no image and no wheel", 2),
    ],
)
def test_a_damaged_release_json_is_refused(
    tmp_path: Path, change: dict[str, Any], message: str, code: int
) -> None:
    """A release.json that SHA256SUMS covers (as if staged so) but that no promotion can
    take: bad input (2), or a folder that is not the release asked for (1)."""
    path = make_repo(tmp_path)
    folder = tmp_path / "dist" / "release" / "1.0.0"
    staged = json.loads((folder / "release.json").read_text()) | change
    (folder / "release.json").write_text(json.dumps(staged))
    resum(folder)
    with pytest.raises(ShipyardError, match=message) as caught:
        plan(path)
    assert caught.value.exit_code == code


def test_an_image_of_a_binary_the_manifest_lost_needs_to(tmp_path: Path) -> None:
    path = make_repo(tmp_path)
    folder = tmp_path / "dist" / "release" / "1.0.0"
    staged = json.loads((folder / "release.json").read_text())
    staged["artifacts"][1]["binary"] = "gone"
    (folder / "release.json").write_text(json.dumps(staged))
    resum(folder)
    with pytest.raises(UsageError, match=r"image of gone, which .* does not declare.*--to HUB"):
        plan(path)
    (image,) = plan(path, to=("127.0.0.9:5000/x",)).images
    assert image.target_repo == "x/gone" and image.movable == ("latest",)


def test_cli_exit_codes_for_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_repo(tmp_path)
    monkeypatch.delenv("VERSION", raising=False)
    monkeypatch.delenv("HUB", raising=False)
    assert main(["promote", "-f", str(path), "--version=1.0.0"]) == 2
    assert "promote needs --from=HUB" in capsys.readouterr().err
    assert main(["promote", "-f", str(path), f"--from={STAGING}"]) == 2
    assert "promote needs --version=X" in capsys.readouterr().err
    assert main(["promote", "-f", str(path), f"--from={STAGING}", "--version=9.9.9"]) == 2
    err = capsys.readouterr().err
    assert "no staged release of 9.9.9" in err and "shipyard release --version=9.9.9" in err
    assert main(["promote", "-f", str(path), "--from=nohost", "--version=1.0.0"]) == 2
    assert "must start with a registry host" in capsys.readouterr().err
    assert main(["promote", "-f", str(path), "--from=127.0.0.1:5000", "--version=1.0.0"]) == 2
    assert "host[:port]/path" in capsys.readouterr().err
    # No index for the staged wheel: exit 2 before any registry is asked (none listens
    # at 127.0.0.1:9, so asking would be exit 1 after retries).
    for name in ("SHIPYARD_INDEX_URL", "SHIPYARD_INDEX_USER", "SHIPYARD_INDEX_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    argv = ["promote", "-f", str(path), "--from=127.0.0.1:9/s", "--version=1.0.0"]
    assert main([*argv, "--to=127.0.0.1:9/final"]) == 2
    assert "no package index is set; set SHIPYARD_INDEX_URL" in capsys.readouterr().err
    # The protected mirror is refused before that, and before any registry too.
    monkeypatch.delenv("CI", raising=False)
    assert main(argv) == 2
    assert "app -> 127.0.0.3:5000/mirror: protected hub" in capsys.readouterr().err
    assert not (tmp_path / "dist" / "report.json").exists()
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == ["release"]


def sign_release(root: Path, name: str = "cosign") -> Path:
    """Sign the staged release of `make_repo` as staging does (its provenance, SHA256SUMS
    and SHA256SUMS.sig) with a new key pair in `root/keys`; the private key's path."""
    folder = root / "dist" / "release" / "1.0.0"
    folder.mkdir(parents=True, exist_ok=True)
    keys = root / "keys"
    keys.mkdir(exist_ok=True)
    key = generate_keypair(keys / f"{name}.key", keys / f"{name}.pub")
    staged = (
        json.loads((folder / "release.json").read_text())
        if (folder / "release.json").is_file()
        else {}
    )
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [s.to_json() for s in expected_subjects(parse_release(staged))]
        if staged
        else [],
        "predicateType": SLSA_PREDICATE,
        "predicate": {"buildDefinition": {"externalParameters": {"version": "1.0.0"}}},
    }
    write_provenance(folder, statement, key)
    resum(folder)
    sign_sums(folder, key)
    return keys / f"{name}.key"


@pytest.fixture
def index_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A package index set (nobody listens at 127.0.0.1:9): a refusal seen is not its."""
    monkeypatch.setenv("SHIPYARD_INDEX_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("SHIPYARD_INDEX_USER", "u")
    monkeypatch.setenv("SHIPYARD_INDEX_PASSWORD", "p")
    for name in ("SHIPYARD_SIGNING_KEY", "SHIPYARD_SIGNING_KEY_PASSWORD", "VERSION", "HUB"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("index_env")
def test_a_release_staged_signed_is_not_promoted_without_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2 before any registry is asked (nobody listens at 127.0.0.1:9: asking would
    be exit 1 after retries) and before promote makes its scratch folder under dist/."""
    path = make_repo(tmp_path)
    key = sign_release(tmp_path)
    argv = ["promote", "-f", str(path), "--from=127.0.0.1:9/s", "--to=127.0.0.1:9/final"]
    assert main([*argv, "--version=1.0.0"]) == 2
    err = capsys.readouterr().err
    assert "was staged signed (SHA256SUMS.sig), but no signing key is given" in err
    assert "nothing was sent" in err and "--signing-key PATH (or SHIPYARD_SIGNING_KEY)" in err
    assert "must not drop the release's signatures" in err
    # The library refuses the same way, whoever calls it: in the plan, and in promote
    # when a plan made with the key is promoted without it.
    with pytest.raises(UsageError, match=r"staged signed .* no signing key is given"):
        plan(path, to=("127.0.0.1:9/final",))
    promotion = plan_promotion(
        manifest_at(path),
        PromoteOptions(STAGING, "1.0.0", to=("127.0.0.1:9/final",)),
        {},
        load_signing_key(key, {}),
    )
    assert promotion.signed and promotion.envelopes
    with pytest.raises(UsageError, match=r"staged signed .* no signing key is given"):
        promote(promotion, index=None)
    # Another key than the one that signed it: refused too, naming where it came from.
    other = sign_release(tmp_path / "elsewhere", "other")
    assert main([*argv, "--version=1.0.0", f"--signing-key={other}"]) == 2
    err = capsys.readouterr().err
    assert f"--signing-key {other}: not the key that signed the release" in err
    assert "does not verify" in err and "nothing was sent" in err
    monkeypatch.setenv("SHIPYARD_SIGNING_KEY", str(other))
    assert main([*argv, "--version=1.0.0"]) == 2
    assert "$SHIPYARD_SIGNING_KEY=" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "dist").iterdir()) == ["release"]
    # With its own key (from the variable, as the CLI loads it) the check passes.
    monkeypatch.setenv("SHIPYARD_SIGNING_KEY", str(key))
    check_signing_key(promotion, load_signing_key(None, os.environ))


@pytest.mark.usefixtures("index_env")
def test_a_bad_signing_key_stops_promote_before_anything_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_repo(tmp_path)
    # 9.9.9 is not staged: the key is loaded first, so the key is what is refused.
    argv = ["promote", "-f", str(path), "--from=127.0.0.1:9/s", "--version=9.9.9"]
    missing = tmp_path / "nope.key"
    assert main([*argv, f"--signing-key={missing}"]) == 2
    assert f"--signing-key {missing}: no such file" in capsys.readouterr().err
    (tmp_path / "bad.key").write_text("secret-ish bytes")
    assert main([*argv, f"--signing-key={tmp_path / 'bad.key'}"]) == 2
    err = capsys.readouterr().err
    assert "not a PEM private key" in err and "secret-ish" not in err
    monkeypatch.setenv("SHIPYARD_SIGNING_KEY", "garbage")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "$SHIPYARD_SIGNING_KEY names no file" in err and "garbage" not in err


def test_an_unsigned_release_is_not_signed_at_promotion(tmp_path: Path) -> None:
    """A key vouches at the final hubs only for what it signed at staging: with a key, a
    release staged unsigned (or whose SHA256SUMS.sig was deleted) is refused (exit 2),
    in the plan and in promote; without one it is promoted unsigned."""
    path = make_repo(tmp_path)
    key = generate_keypair(tmp_path / "k.key", tmp_path / "k.pub")
    options = PromoteOptions(STAGING, "1.0.0", to=("127.0.0.9:5000/final",))
    with pytest.raises(UsageError, match=r"staged unsigned \(no SHA256SUMS\.sig\), but a signing"):
        plan_promotion(manifest_at(path), options, {}, key)
    promotion = plan(path, to=("127.0.0.9:5000/final",))
    assert not promotion.signed and promotion.envelopes == ()
    check_signing_key(promotion, None)
    with pytest.raises(UsageError, match=r"staged unsigned"):
        check_signing_key(promotion, key)
    with pytest.raises(UsageError, match=r"staged unsigned"):
        promote(promotion, index=None, signing_key=key)


def test_the_staged_sboms_are_rebuilt_and_checked_against_release_json(tmp_path: Path) -> None:
    path = make_repo(tmp_path)
    folder = tmp_path / "dist" / "release" / "1.0.0"
    (folder / "sbom").mkdir()
    documents: dict[str, tuple[str, str]] = {}  # path -> platform, platform manifest
    for child, arch in zip(CHILDREN, ("amd64", "arm64"), strict=True):
        rel = f"sbom/app-1.0.0-image-linux_{arch}.cdx.json"
        (folder / rel).write_text(json.dumps({"bomFormat": "CycloneDX", "arch": arch}))
        documents[rel] = (f"linux/{arch}", child)

    def made(*rels: str) -> str:
        layers = [(Path(r).name, documents[r][0], (folder / r).read_bytes()) for r in rels]
        return attachment(layers).digest

    whole = made(*documents)
    staged = json.loads((folder / "release.json").read_text())
    staged["artifacts"][1]["sbom"] = {
        "tag": attached_tag(DIGEST, "sbom"),
        "digest": whole,
        "documents": list(documents),
        "platforms": [
            {"tag": attached_tag(child, "sbom"), "digest": made(rel), "documents": [rel]}
            for rel, (_, child) in documents.items()
        ],
    }
    staged["artifacts"] += [
        {
            "kind": "sbom",
            "path": rel,
            "platform": platform,
            "binary": "app",
            "sha256": hashlib.sha256((folder / rel).read_bytes()).hexdigest(),
        }
        for rel, (platform, _) in documents.items()
    ]
    (folder / "release.json").write_text(json.dumps(staged))
    resum(folder)
    (image,) = plan(path, to=("127.0.0.9:5000/final",)).images
    amd64, arm64 = documents
    assert [(s.tag, s.digest) for s in image.sboms] == [
        (attached_tag(DIGEST, "sbom"), whole),
        ("sha256-" + "2" * 64 + ".sbom", made(amd64)),
        ("sha256-" + "3" * 64 + ".sbom", made(arm64)),
    ]
    # Each layer carries the platform the sbom artifact of release.json gives it.
    layers = json.loads(image.sboms[0].made.manifest)["layers"]
    assert [layer["annotations"][PLATFORM_NOTE] for layer in layers] == [
        "linux/amd64",
        "linux/arm64",
    ]
    # A document changed since staging (SHA256SUMS and release.json's sha256 too):
    # refused, naming both digests of the attachment.
    (folder / arm64).write_text("{}")
    for art in staged["artifacts"]:
        if art.get("path") == arm64:
            art["sha256"] = hashlib.sha256(b"{}").hexdigest()
    (folder / "release.json").write_text(json.dumps(staged))
    resum(folder)
    with pytest.raises(UsageError, match=rf"SBOMs of app make the attachment .* {whole} "):
        plan(path, to=("127.0.0.9:5000/final",))


BLOCKER = """
import importlib.abc, json, pathlib, sys, types
BLOCKED = tuple(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(BLOCKED):
            raise ImportError(f"promotion imported {name}")
        return None
sys.meta_path.insert(0, Block())
# shipyard.release's __init__ loads the whole release pipeline: stand it aside, so
# what is checked is what promotion's own modules import.
import shipyard
package = types.ModuleType("shipyard.release")
package.__path__ = [str(pathlib.Path(shipyard.__file__).parent / "release")]
sys.modules["shipyard.release"] = package
importlib.import_module(sys.argv[2])
if len(sys.argv) > 3:  # run the command as far as it goes without a registry
    from shipyard.cli import main
    code = main(["promote", "-f", sys.argv[3], "--from=127.0.0.1:9/s", "--version=9.9.9"])
    assert code == 2, code
print(json.dumps(sorted(m for m in sys.modules if m.startswith("shipyard"))))
"""
PIPELINE = ("shipyard.release.pipeline", "shipyard.release.building", "shipyard.release.staging")


@pytest.mark.parametrize(
    ("module", "blocked"),
    [
        # The library: no part of the engine at all, no builder, no release stage.
        ("shipyard.release.promote", ("shipyard.engine", "shipyard.builders", *PIPELINE)),
        # The command: the CLI package loads the engine's planning for every command;
        # promote adds no builder, no build runner and no release stage.
        ("shipyard.cli._promote", ("shipyard.builders", "shipyard.engine.run", *PIPELINE)),
    ],
)
def test_promotion_never_imports_the_build_engine(
    tmp_path: Path, module: str, blocked: tuple[str, ...]
) -> None:
    run = [str(make_repo(tmp_path))] if module.startswith("shipyard.cli") else []
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER, ",".join(blocked), module, *run],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert module in loaded and "shipyard.release.promote" in loaded
    assert not [m for m in loaded if m.startswith(blocked)]


@pytest.mark.parametrize(
    ("argv", "cli"),
    [
        (
            f"promote --from={STAGING} --version=1.0.0",
            f"promote --from {STAGING} --version 1.0.0",
        ),
        (
            f"promote --from {STAGING} -v 1.0.0 --to=127.0.0.2:5000/a --to=b.example:1/x,c:1/y "
            "-d -i http://127.0.0.1:1/ --force-protected --clobber --json -f b.yaml "
            "--signing-key=k.key",
            f"promote --from {STAGING} --version 1.0.0 --to 127.0.0.2:5000/a "
            "--to b.example:1/x,c:1/y --dry-run --index-url http://127.0.0.1:1/ "
            "--force-protected --clobber --json -f b.yaml --signing-key k.key",
        ),
    ],
)
def test_invoke_promote_means_the_same_command_line(argv: str, cli: str) -> None:
    assert "promote" in ns.tasks
    made = parser().parse_args(shipyard_argv(argv.split()))
    assert made == parser().parse_args(cli.split())


def test_invoke_promote_runs_the_cli_from_this_repositorys_tasks_py(tmp_path: Path) -> None:
    """`invoke promote` through invoke's own program and the repository's tasks.py."""
    make_repo(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("HUB", "VERSION", "CI")}
    flags = [f"--from={STAGING}", "--version=1.0.0", "--to=127.0.0.3:5000/mirror"]
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "promote", *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    # The CLI ran (in-process) and refused the protected hub before any network use.
    assert done.returncode == 2, done.stderr
    assert "app -> 127.0.0.3:5000/mirror: protected hub" in done.stderr
    assert "--force-protected to `shipyard promote`" in done.stderr
