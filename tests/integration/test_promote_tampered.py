"""Promote and verify trust only what was signed (security issue, second round, item 1).

The attack, end to end against the real registries: an honest release of meshctl,
staged signed and published to a staging hub on the open registry. An attacker with
push access to the staging hub and write access to the staged folder pushes another
image under the version tag, rewrites release.json to name its digest and platform
manifests, drops the image's `sbom` entry and deletes provenance.intoto.jsonl,
leaving SHA256SUMS and SHA256SUMS.sig alone. Before the fix, `shipyard promote
--signing-key` exited 0, signed the attacker's digest at the final hub and moved
its tags, and `shipyard verify FINAL/meshctl:1.0.0` then accepted it.

Now promote runs the check `shipyard verify` runs on the folder before it sends
anything: exit 1 naming the mismatch, the final hub holds nothing of either
image, and `verify` of the final reference fails. The folder check itself refuses
the same folder (exit 1), and refuses a copy of the honest folder under another
version's name (`--version`, item 9).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shipyard.oci.mediatypes import is_index
from shipyard.oci.remote.registry import Registry
from shipyard.release import ReleaseOptions, release
from shipyard.release.keys import generate_keypair
from shipyard.release.signing import attached_tag
from shipyard.release.staged import SUMS_SIG
from tests.integration._release import RUN, Hubs, context, hubs, make_repo
from tests.integration.conftest import Services
from tests.integration.registries import PASSWORD, USER
from tests.integration.test_promote import BUILDERS, MANIFEST, basic_client
from tests.reliability import record

__all__ = ["hubs"]  # the fixture the tests take, imported for pytest to find
pytestmark = [
    pytest.mark.integration,
    pytest.mark.reliability,
    pytest.mark.requires("registry"),
]

VERSION = "1.0.0"


def _shipyard(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shipyard", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )


def _forge(client: Registry, repo: str, digest: str) -> tuple[str, list[str]]:
    """The attacker's image at the staging hub: the honest one with every platform
    manifest and the index changed (an annotation), pushed by digest and then under
    the version tag. Its index digest and its platform manifests' digests."""
    data, media_type, _ = client.get_manifest(repo, digest)
    assert is_index(media_type)
    index = json.loads(data)
    children = []
    for entry in index["manifests"]:
        child, child_type, _ = client.get_manifest(repo, entry["digest"])
        forged = json.loads(child)
        forged["annotations"] = {**forged.get("annotations", {}), "evil": "yes"}
        body = json.dumps(forged).encode()
        entry["digest"] = client.put_manifest(repo, _digest(body), body, child_type)
        entry["size"] = len(body)
        children.append(entry["digest"])
    body = json.dumps(index).encode()
    forged_digest = client.put_manifest(repo, _digest(body), body, media_type)
    client.put_manifest(repo, VERSION, body, media_type)
    return forged_digest, children


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_promote_refuses_a_tampered_signed_release_and_the_final_hub_stays_empty(
    services: Services, hubs: Hubs, tmp_path: Path
) -> None:
    key, public = tmp_path / "cosign.key", tmp_path / "cosign.pub"
    generate_keypair(key, public)
    staging = f"{hubs.open}/tamper-stage-{RUN}"
    final = f"{hubs.basic.host}/tamper-{RUN}"
    staging_repo, final_repo = f"tamper-stage-{RUN}/meshctl", f"tamper-{RUN}/meshctl"
    manifest = MANIFEST.replace("FINAL_HUB", final).replace("[wheel, image]", "[image]")
    repo = make_repo(tmp_path / "repo", manifest)
    user_var = "SHIPYARD_REGISTRY_" + hubs.basic.host.replace(".", "_").replace(":", "_")
    env = {k: v for k, v in os.environ.items() if k not in ("HUB", "VERSION", "CI")}
    env |= {f"{user_var}_USER": USER, f"{user_var}_PASSWORD": PASSWORD, "CI": "true"}
    env = {k: v for k, v in env.items() if not k.startswith("SHIPYARD_INDEX_")}
    # The honest release: staged signed, published to the staging hub.
    ctx = context(
        repo,
        env | {"SHIPYARD_SIGNING_KEY": str(key), "HUB": staging},
        ReleaseOptions(version=VERSION),
        builders=BUILDERS,
    )
    release(ctx)
    folder = repo / "dist" / "release" / VERSION
    assert (folder / SUMS_SIG).is_file()
    honest_copy = tmp_path / "honest" / VERSION
    shutil.copytree(folder, honest_copy)
    staged = json.loads((folder / "release.json").read_text())
    (image,) = [a for a in staged["artifacts"] if a["kind"] == "image"]
    honest = image["digest"]
    sums = (folder / "SHA256SUMS").read_bytes(), (folder / SUMS_SIG).read_bytes()
    # The attack.
    open_client = Registry(hubs.open)
    forged, children = _forge(open_client, staging_repo, honest)
    assert open_client.manifest_exists(staging_repo, VERSION) == forged != honest
    image["digest"] = forged
    image["manifests"] = [
        {**m, "digest": d} for m, d in zip(image["manifests"], children, strict=True)
    ]
    del image["sbom"]
    (folder / "release.json").write_text(json.dumps(staged, indent=2) + "\n")
    (folder / "provenance.intoto.jsonl").unlink()
    assert ((folder / "SHA256SUMS").read_bytes(), (folder / SUMS_SIG).read_bytes()) == sums
    # verify refuses the folder.
    checked = _shipyard(repo, env, "verify", str(folder), "--key", str(public))
    assert checked.returncode == 1, checked.stderr
    assert "provenance.intoto.jsonl is listed in SHA256SUMS but missing" in checked.stderr
    # promote runs that very check first: exit 1, nothing sent to the final hub.
    refused = _shipyard(repo, env, "promote", f"--from={staging}", f"--version={VERSION}",
                        f"--signing-key={key}")  # fmt: skip
    assert refused.returncode == 1, refused.stderr + refused.stdout
    assert "nothing was promoted" in refused.stderr
    assert "Traceback" not in refused.stderr
    client = basic_client(hubs)
    for ref in (forged, honest, *children, VERSION, "latest", attached_tag(forged, "sig")):
        assert client.manifest_exists(final_repo, ref) is None, ref
    # The final reference does not verify (there is nothing there to verify).
    final_ref = _shipyard(repo, env, "verify", f"{final}/meshctl:{VERSION}", "--key", str(public))
    assert final_ref.returncode == 1, final_ref.stderr
    # The honest folder still verifies, and not under another version's name.
    assert _shipyard(repo, env, "verify", str(honest_copy), "--key", str(public)).returncode == 0
    renamed = tmp_path / "rel" / "9.9.9"
    shutil.copytree(honest_copy, renamed)
    moved = _shipyard(repo, env, "verify", str(renamed), "--key", str(public))
    assert moved.returncode == 1
    assert "is the release of 1.0.0, not 9.9.9" in moved.stderr
    asked = _shipyard(
        repo, env, "verify", str(honest_copy), "--key", str(public), "--version", "2.0.0"
    )
    assert asked.returncode == 1 and "not 2.0.0" in asked.stderr
    record(
        "promote of a tampered signed release",
        area="release trust",
        cases=4,
        injected="a signed release at a staging hub; another image pushed under its version "
        "tag, release.json rewritten to name it (index and platform manifests), its sbom "
        "entry dropped, provenance.intoto.jsonl deleted, SHA256SUMS and .sig left alone; "
        "the honest folder copied to rel/9.9.9; --version 2.0.0",
        result="promote exited 1 before sending anything (0 manifests, tags or signatures "
        "at the final hub), verify of the folder and of the final reference exited 1, the "
        "renamed copy and the wrong --version exited 1; the honest folder verifies",
        figures={"promoted": 0, "final_manifests": 0},
    )
