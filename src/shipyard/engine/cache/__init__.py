"""The action cache: local entries (`local`), a shared cache behind them (`tiered`)
named by a URL (`endpoint`: an OCI registry in `remote`, or another protocol's
client, brief until the server first answers: `patience`) and used under the
build's policy (`mode`, `policy`; a blob it already placed is copied: `placed`),
and the checks every restore passes (`restore`).

Import from the submodules; the package itself imports nothing, so a build
without a remote cache never loads the HTTP stack.
"""
