"""Size budgets as release validate checks them: `shipyard.engine.sizes`, where
`shipyard build` checks them too (a warning there, an error here)."""

from shipyard.engine.sizes import Measured, SizeFinding, check_sizes, format_size, measure

__all__ = ["Measured", "SizeFinding", "check_sizes", "format_size", "measure"]
