"""A forged publish.journal cannot make a signed release end without its SBOMs and
attestation (review of the security fixes, finding 2).

publish.journal is publish's own state, outside SHA256SUMS: whoever can write the
staged folder can write it. Before the fix, journal lines for every `sbom ...` and
`attest ...` step made a resumed release skip them and end with exit 0: the image
at the hub had its signature and tags, but no `.sbom` and no `.att`, and nothing
said so. Now the verify stage checks at the registry whatever the journal says was
done (every SBOM attachment, and with a key every signature and attestation): the
release fails naming the missing attachment and how to recover, the version is not
recorded as released, and a run after removing the journal finishes it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from shipyard.oci.remote.registry import Registry, RegistryError
from shipyard.release import ReleaseOptions, prepare_release, release
from shipyard.release.journal import JOURNAL_NAME, Journal
from shipyard.release.keys import generate_keypair
from shipyard.release.preflight import RELEASED_STEP
from shipyard.release.publish import publish_steps
from shipyard.release.signing import attached_tag
from shipyard.release.staged import parse_release
from tests.integration._release import RUN, make_repo
from tests.integration.conftest import Services
from tests.integration.test_promote import BUILDERS, MANIFEST
from tests.reliability import record

pytestmark = [
    pytest.mark.integration,
    pytest.mark.reliability,
    pytest.mark.requires("registry"),
]

VERSION = "1.0.0"


class _Crash(Registry):
    """A registry client whose manifest PUTs fail: a publish that dies early."""

    def put_manifest(self, repo: str, reference: str, data: bytes, media_type: str) -> str:
        raise RegistryError(self.host, "put manifest", "simulated crash")


def test_a_forged_journal_cannot_drop_the_sboms_and_attestation(
    services: Services, tmp_path: Path
) -> None:
    key, public = tmp_path / "cosign.key", tmp_path / "cosign.pub"
    generate_keypair(key, public)
    hub = f"{services.registry}/journal-{RUN}"
    repo = make_repo(
        tmp_path / "repo",
        MANIFEST.replace("FINAL_HUB", hub).replace("[wheel, image]", "[image]"),
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HUB", "VERSION", "CI")}
    env = {k: v for k, v in env.items() if not k.startswith("SHIPYARD_INDEX_")}
    env |= {"CI": "true", "SHIPYARD_SIGNING_KEY": str(key), "HUB": hub}
    manifest = repo / "binaries.yaml"

    def run(
        registry: type[Registry] = Registry, on_step: Callable[[str], None] = lambda _: None
    ) -> None:
        ctx = prepare_release(
            manifest,
            ReleaseOptions(version=VERSION),
            env=env,
            builders=BUILDERS,
            registry_for=registry,
            on_step=on_step,
        )
        release(ctx)

    with pytest.raises(RegistryError):
        run(_Crash)  # staged signed; publish died at its first manifest
    folder = repo / "dist" / "release" / VERSION
    staged = json.loads((folder / "release.json").read_text())
    forged = [
        s
        for s in publish_steps(parse_release(staged), signed=True)
        if s.startswith(("sbom ", "attest "))
    ]
    assert forged
    journal = Journal(folder / JOURNAL_NAME)
    for step in forged:
        journal.record(step, digest="forged")
    lines: list[str] = []
    run(on_step=lines.append)
    again = [line for line in lines if line.endswith("but not at the registry: doing it again")]
    assert len(again) == len(forged), lines
    (image,) = [a for a in staged["artifacts"] if a["kind"] == "image"]
    client, name = Registry(services.registry), f"journal-{RUN}/meshctl"
    for suffix in ("sig", "att", "sbom"):
        assert client.manifest_exists(name, attached_tag(image["digest"], suffix)), suffix
    assert Journal(folder / JOURNAL_NAME).done(RELEASED_STEP)
    record(
        "a forged publish.journal on a signed release",
        area="release trust",
        cases=len(forged),
        injected=f"{len(forged)} journal lines marking every SBOM attachment and attestation "
        "of a signed release as done, before a resumed publish",
        result=f"{len(again)} journalled steps not found at the registry were done again; the "
        "release finished with .sig, .att and .sbom at the hub (before the fix: exit 0 "
        "without .att and .sbom)",
    )
