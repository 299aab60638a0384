"""Publish rails: protected hubs, and no-clobber for the tags a release moves.

Two checks Istio's release tooling makes before anything is pushed:

- a hub listed in `image.protected` takes pushes only from CI (`CI` set and not
  empty) or when the user says so with `--force-protected`; anywhere else
  `push` and `release` stop with exit 2 before the first byte is sent;
- a release never moves an existing tag off another image unless the tag is in
  `image.movable_tags` (default `latest`) or `--clobber` is given. Preflight
  checks every tag the release will push (exit 2, nothing built); publish checks
  each tag again just before moving it, when the digest is known (exit 1).

A resumed release (dist/release/<version>/publish.journal) may find its own
images behind its tags: a digest the journal records as pushed by this release
to that hub is not a clash.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from shipyard.errors import ShipyardError, UsageError
from shipyard.manifest import Binary
from shipyard.oci.remote.push import parse_hub, variant_tags
from shipyard.oci.remote.registry import Registry
from shipyard.release.journal import Journal

__all__ = [
    "CI_ENV",
    "ProtectedHub",
    "TagClash",
    "TagClobberError",
    "check_protected",
    "check_tag_move",
    "clash_error",
    "find_clashes",
    "is_ci",
    "journal_digests",
    "refused_hubs",
]

CI_ENV = "CI"


class TagClobberError(ShipyardError):
    """A tag to be moved now points at another image, and it may not move (exit 1)."""


def is_ci(env: Mapping[str, str]) -> bool:
    """True when `CI` is set to something (as every CI service sets it)."""
    return bool(env.get(CI_ENV, "").strip())


@dataclass(frozen=True)
class ProtectedHub:
    """A binary's protected hub that this push may not reach."""

    binary: str
    hub: str


def refused_hubs(
    binaries: Iterable[Binary], env: Mapping[str, str], *, force: bool
) -> tuple[ProtectedHub, ...]:
    """Each (binary, protected hub) a push would reach outside CI without --force-protected."""
    if force or is_ci(env):
        return ()
    return tuple(
        ProtectedHub(binary.name, hub)
        for binary in binaries
        for hub in binary.image.hubs
        if hub in binary.image.protected  # validated against `hubs` by the same text
    )


def check_protected(
    binaries: Iterable[Binary], env: Mapping[str, str], *, force: bool, command: str
) -> None:
    """Raise UsageError (exit 2) naming each binary and protected hub `command` would push to.

    `command` is what the user ran (`push`, `release`), for the fix.
    """
    refused = refused_hubs(binaries, env, force=force)
    if not refused:
        return
    where = "; ".join(f"{r.binary} -> {r.hub}" for r in refused)
    raise UsageError(
        f"{where}: protected hub (image.protected), pushed to only from CI; nothing was "
        f"pushed. Run it in CI (CI set), or pass --force-protected to `shipyard {command}` "
        "if you mean to push there from here"
    )


@dataclass(frozen=True)
class TagClash:
    """A tag the release would move that already names another image."""

    binary: str
    hub: str  # as image.hubs writes it
    reference: str  # host/repository:tag
    tag: str
    digest: str  # what the tag points at now


def journal_digests(journal: Journal | None, hub: str, binary: str) -> frozenset[str]:
    """The digests a release's journal says it pushed to `<hub>/<binary>` (image or tag).

    The step names are publish's (`image <hub>/<binary>@<digest>`, `tag
    <hub>/<binary>:<tag>@<digest>`, see `publish.publish_steps`); binary names
    never hold `@` or `:`, so the prefixes are unambiguous.
    """
    if journal is None:
        return frozenset()
    prefixes = (f"image {hub}/{binary}@", f"tag {hub}/{binary}:")
    found = set()
    for step in journal.steps:
        record = journal.get(step) or {}
        digest = record.get("digest")
        if step.startswith(prefixes) and isinstance(digest, str):
            found.add(digest)
    return frozenset(found)


def find_clashes(
    client: Registry,
    binary: Binary,
    hub: str,
    tags: Sequence[str],
    *,
    pushed: Collection[str] = (),
    variant: str = "",
) -> tuple[TagClash, ...]:
    """The tags of `tags` that exist on `hub` for `binary` and may not move.

    A tag in `binary.image.movable_tags` may move (for an image variant, those
    tags suffixed with its name); so may one that points at a digest in `pushed`
    (what this release's journal says it pushed there).
    """
    parsed = parse_hub(hub)
    repo = parsed.repository(binary.name)
    movable = variant_tags(binary.image.movable_tags, variant)
    clashes = []
    for tag in tags:
        if tag in movable:
            continue
        found = client.manifest_exists(repo, tag)
        if found is not None and found not in pushed:
            clashes.append(TagClash(binary.name, hub, f"{parsed.host}/{repo}:{tag}", tag, found))
    return tuple(clashes)


def clash_error(clashes: Sequence[TagClash], version_tag: str) -> UsageError:
    """The preflight error for `clashes` (exit 2): each tag, its digest, and the fixes."""
    listed = "; ".join(f"{c.reference} is {c.digest}" for c in clashes)
    released = any(c.tag == version_tag for c in clashes)
    fix = (
        "choose a new version, or pass --clobber to move the tags"
        if released
        else "remove the tag, add it to image.movable_tags, or pass --clobber to move it"
    )
    what = "the version is already released" if released else "a release never moves them"
    return UsageError(f"{listed}: {what} (no-clobber); nothing was built. {fix}")


def check_tag_move(
    client: Registry,
    host: str,
    repo: str,
    tag: str,
    digest: str,
    *,
    movable: Collection[str],
    clobber: bool,
) -> None:
    """Just before `tag` moves to `digest`: raise TagClobberError (exit 1) if it now
    names another image and may not move (not in `movable`, no --clobber)."""
    if clobber or tag in movable:
        return
    found = client.manifest_exists(repo, tag)
    if found not in (None, digest):
        raise TagClobberError(
            f"{host}/{repo}:{tag} now points at {found}, not the {digest} being published, "
            "and it is not a movable tag (no-clobber); it was left as it is. Find out who "
            "pushed it, then release a new version, add the tag to image.movable_tags, or "
            "pass --clobber"
        )
