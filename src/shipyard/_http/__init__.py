"""HTTP shared by the registry and package-index clients: the retry policy (`retry`)
and the TLS, redirect and timeout rules of every request (`transport`).
"""
