"""The action cache: local entries (`local`), an OCI registry behind them (`remote`),
and the checks every restore passes (`restore`).

Import from the submodules; the package itself imports nothing, so a build
without a remote cache never loads the HTTP stack.
"""
