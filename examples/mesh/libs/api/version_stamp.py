"""The version hatchling stamps into the wheel; shipyard sets SHIPYARD_VERSION when it builds."""

import os

__version__ = os.environ.get("SHIPYARD_VERSION", "0.0.0")
