"""HTTP shared by the registry and package-index clients, beneath both: the retry policy
and loop (`retry`), the typed errors (`errors`), and the client that checks TLS, plain
HTTP and redirects on every request (`transport.Client`). Nothing here knows what a
registry or an index is: `shipyard.oci.remote.transport` and `shipyard.release.index`
build on it.
"""
