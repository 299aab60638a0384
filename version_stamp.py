"""Version source for hatchling: shipyard stamps SHIPYARD_VERSION when it builds."""

import os

__version__ = os.environ.get("SHIPYARD_VERSION", "0.1.0")
