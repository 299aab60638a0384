"""OCI images: the pure model, layers, layouts, docker-archives and bases; registries in `remote`.

Import from the submodules (`shipyard.oci.model`, `.layer`, `.layout`, `.archive`,
`.base`, `.keys`, and `shipyard.oci.remote.reference`, `.auth`, `.registry`, `.push`).
The packages themselves import nothing, so a build that touches no registry never
loads the HTTP stack: a no-op build's budget is a few hundred milliseconds.
"""
