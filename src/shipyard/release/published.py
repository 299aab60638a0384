"""What was published, checked where it went: the one check publish and promote end with.

Every tag at every hub names release.json's digest, every platform manifest and
SBOM attachment is there, with a key every signature (and attestation) verifies,
and the index serves every wheel's sha256: whatever the publishers did (or a
journal says they did) is checked at the registry and the index.
"""

from __future__ import annotations

from shipyard.release.publishers import Job, Placement

__all__ = ["verify_published"]


def _verify_signed(job: Job, place: Placement) -> None:
    from shipyard.release.keys import VerifyError
    from shipyard.release.provenance import verify_image_attestation
    from shipyard.release.signing import verify_image_signature

    assert job.key is not None
    client, digest = job.client(place), place.image.digest
    try:
        verify_image_signature(client, place.repo, digest, job.key.public)
        if (
            job.envelopes
            and verify_image_attestation(client, place.repo, digest, job.key.public) is None
        ):
            raise VerifyError(f"{place.where()}@{digest} has no attestation (.att)")
    except VerifyError as exc:
        raise job.error(f"{exc}{job.hint}") from None
    job.on_step(f"verified the signature of {place.where()}@{digest}")


def _verify_place(job: Job, place: Placement) -> None:
    client, image = job.client(place), place.image
    for tag in image.tags:
        found = client.manifest_exists(place.repo, tag)
        if found != image.digest:
            raise job.error(f"{place.where(tag)} is {found}, release.json says {image.digest}")
    for child in image.manifests:
        if client.manifest_exists(place.repo, child.digest) != child.digest:
            raise job.error(f"{place.where()}@{child.digest} is missing")
    for sbom in image.sboms:
        found = client.manifest_exists(place.repo, sbom.tag)
        if found != sbom.digest:
            raise job.error(
                f"{place.where(sbom.tag)} is {found}, release.json says {sbom.digest}{job.hint}"
            )
    if job.key is not None:
        _verify_signed(job, place)
    job.on_step(f"verified {place.where()} {', '.join(image.tags)}")


def verify_published(job: Job) -> None:
    """Every tag at every hub names release.json's digest, every platform manifest and
    SBOM attachment is there, with a key every signature (and attestation) verifies,
    and the index serves every wheel's sha256: whatever was done, checked at the
    registry and the index. `job.error` names the first mismatch."""
    for place in job.places:
        _verify_place(job, place)
    for wheel in job.release.wheels:
        found = job.index.sha256(wheel.name) if job.index is not None else None
        if found != wheel.sha256:
            raise job.error(f"the index serves {wheel.name} as {found}, expected {wheel.sha256}")
        job.on_step(f"verified wheel {wheel.name}")
