"""OCI registries: references, credentials, the registry client and pushing layouts.

Import from the submodules (`reference`, `auth`, `registry`, `push`). The package
itself imports nothing, so importing `shipyard.oci.remote.reference` does not load
the HTTP stack.
"""
