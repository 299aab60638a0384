"""OCI images: the pure model, layers, layouts, docker-archives and bases; registries in `remote`.

Import from the submodules (`shipyard.oci.mediatypes`, `.model`, `.layer`, `.layout`,
`.archive`, `.basespec`, `.base`, `.keys`, and `shipyard.oci.remote.reference`, `.auth`,
`.registry`, `.push`). `mediatypes` knows both families (OCI and Docker schema 2);
`basespec` parses `image.base` for the manifest, the action key and the loader.
The packages themselves import nothing, so a build that touches no registry never
loads the HTTP stack: a no-op build's budget is a few hundred milliseconds.
"""
