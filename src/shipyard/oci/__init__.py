"""OCI images: the pure model, layers, layouts, docker-archives, bases, and the registry client.

Import from the submodules (`shipyard.oci.model`, `.layer`, `.layout`, `.archive`,
`.base`, `.reference`, `.auth`, `.registry`, `.push`). The package itself imports
nothing, so a build that touches no registry never loads the HTTP stack: a no-op
build's budget is a few hundred milliseconds.
"""
