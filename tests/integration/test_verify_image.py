"""`shipyard verify IMAGE_REF` against what a hostile registry can serve (security issue,
second round, item 5): a signature layer whose descriptor says 180 bytes while the
registry holds megabytes under its digest. The real registry takes such a manifest
(it checks that the blob exists, not its size), so the fault is the real one's.

Before the fix, `fetch_blob` streamed the whole blob to /tmp and only then compared
it with its 16 MiB limit (2 GiB written for a descriptor of 180 bytes); now a blob
said to be over the limit is never asked for, and a download stops at the first
byte past the descriptor's size.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from shipyard.oci.mediatypes import OCI_MANIFEST
from shipyard.oci.remote.attach import attached_tag, attachment_config
from shipyard.oci.remote.registry import Registry
from shipyard.release.keys import VerifyError
from shipyard.release.signing import BLOB_LIMIT, SIMPLE_SIGNING_MEDIA_TYPE, verify_image_signature
from tests.integration.conftest import Services
from tests.reliability import record

pytestmark = [
    pytest.mark.integration,
    pytest.mark.reliability,
    pytest.mark.requires("registry"),
]

RUN = uuid.uuid4().hex[:8]
BIG = 24 << 20  # over the 16 MiB a signature may have


def _put(client: Registry, repo: str, data: bytes, folder: Path) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = folder / digest.replace(":", "-")
    path.write_bytes(data)
    client.push_blob(repo, digest, len(data), path)
    return digest


def _sig_manifest(client: Registry, repo: str, layer: dict[str, object], folder: Path) -> None:
    """A `.sig` manifest holding `layer`, tagged for the image IMAGE in `repo`."""
    config = attachment_config([layer])
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "size": len(config),
            "digest": _put(client, repo, config, folder),
        },
        "layers": [layer],
    }
    body = json.dumps(manifest).encode()
    client.put_manifest(repo, attached_tag(IMAGE, "sig"), body, OCI_MANIFEST)


IMAGE = "sha256:" + "ab" * 32


@pytest.mark.parametrize("said", [180, BIG])
def test_a_signature_blob_is_never_fetched_past_its_descriptor(
    services: Services, tmp_path: Path, said: int
) -> None:
    client = Registry(services.registry)
    repo = f"verify-big-{RUN}-{said}"
    big = _put(client, repo, os.urandom(BIG), tmp_path)
    layer = {
        "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
        "size": said,
        "digest": big,
        "annotations": {"dev.cosignproject.cosign/signature": "AAAA"},
    }
    _sig_manifest(client, repo, layer, tmp_path)
    public = ec.generate_private_key(ec.SECP256R1()).public_key()
    reader = Registry(services.registry)
    with pytest.raises(VerifyError) as caught:
        verify_image_signature(reader, repo, IMAGE, public)
    message = str(caught.value)
    if said > BLOB_LIMIT:  # refused from the descriptor: the blob is never asked for
        assert f"is {said} bytes, over the {BLOB_LIMIT}" in message
        assert reader.stats.bytes_downloaded == 0
    else:  # asked for, and cut off before the first byte past the 180 said
        assert f"more than the {said} bytes" in message
    assert reader.stats.bytes_downloaded <= said, reader.stats.bytes_downloaded
    record(
        f"a signature blob of {BIG >> 20} MiB behind a descriptor of {said} bytes",
        area="resource bounds",
        cases=1,
        injected=f"a real registry holding {BIG} bytes under a `.sig` layer's digest whose "
        f"descriptor says {said} bytes",
        result=f"verify exited with a VerifyError after downloading "
        f"{reader.stats.bytes_downloaded} bytes (before the fix: the whole blob, to /tmp)",
        figures={"downloaded": reader.stats.bytes_downloaded, "said": said},
    )
