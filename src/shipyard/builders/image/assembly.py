"""Each platform's image: the base's image, then shipyard's layers, then the config.

The config's entry point is the binary's entry script, its PATH ends with the
script's folder (so a binary called `echo` does not shadow /bin/echo for the
image's shell scripts), PYTHONPATH lists the sites, and the image's and a variant's
env, labels, user and working folder are merged in. The annotations name the
image (created, version, source, title, revision) and, per platform, its base.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from shipyard.builders.image.layers import Layered, Roles
from shipyard.builders.image.variants import Flavour
from shipyard.builders.kinds import image_settings, source_url
from shipyard.engine.context import BuildContext
from shipyard.engine.plan import Action
from shipyard.oci.base import DEFAULT_PATH, Base
from shipyard.oci.model import Image, append_layer, as_annotations, with_config

__all__ = ["BASE_ANNOTATIONS", "platform_images"]

_OCI = "org.opencontainers.image."
# The annotations naming a platform's base: on its manifest, never on the index.
BASE_ANNOTATIONS = _OCI + "base."


def _notes(action: Action, ctx: BuildContext) -> dict[str, str]:
    notes = {
        _OCI + "created": ctx.stamp.created,
        _OCI + "version": ctx.stamp.version,
        _OCI + "source": source_url(action, ctx),
        _OCI + "title": action.binaries[0],
    }
    if ctx.stamp.revision:
        notes[_OCI + "revision"] = ctx.stamp.revision
    return notes


def platform_images(
    action: Action,
    ctx: BuildContext,
    bases: Mapping[str, Base],
    layers: Layered,
    roles: Roles,
    flavour: Flavour,
) -> list[Image]:
    """One image per platform: `bases`' image, then `layers`, then the config with
    `flavour`'s env."""
    notes = _notes(action, ctx)
    images = []
    for platform in action.platforms:
        base = bases[platform]
        image = dataclasses.replace(base.image, created=ctx.stamp.created)
        for created_by, made in layers[platform]:
            image = append_layer(image, made, created_by=created_by)
        image = _configure(image, action, roles, notes, flavour.env_map)
        base_notes = {BASE_ANNOTATIONS + "name": base.name} | (
            {BASE_ANNOTATIONS + "digest": base.digest} if base.digest else {}
        )
        images.append(dataclasses.replace(image, annotations=as_annotations(notes | base_notes)))
    return images


def _configure(
    image: Image,
    action: Action,
    roles: Roles,
    notes: dict[str, str],
    extra_env: Mapping[str, str],
) -> Image:
    settings = image_settings(action)
    binary = action.binaries[0]
    env = dict(line.partition("=")[::2] for line in image.config.env)
    env["PATH"] = f"{env.get('PATH') or DEFAULT_PATH}:/opt/{binary}/bin"
    env["PYTHONPATH"] = ":".join(roles.sites)
    env.update(extra_env)  # the image's env, with a variant's merged over it
    labels = dict(image.config.labels) | notes | dict(settings.labels)
    return with_config(
        image,
        env=tuple(f"{k}={v}" for k, v in env.items()),
        entrypoint=(f"/opt/{binary}/bin/{binary}",),
        cmd=None,
        user=settings.user or image.config.user,
        working_dir=settings.workdir or image.config.working_dir,
        labels=labels,
    )
