"""This repository's invoke tasks: the same collection users import into theirs."""

from shipyard.tasks import ns

__all__ = ["ns"]
