"""This repository's invoke tasks: the same collection users import into theirs."""

from shipyard.cli.tasks import ns

__all__ = ["ns"]
