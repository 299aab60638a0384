"""The builders of each output kind (wheel, zipapp, image), registered by kind."""

from shipyard.builders.kinds import ImageKinds
from shipyard.builders.wheel import WheelBuilder
from shipyard.builders.zipapp import ZipappBuilder
from shipyard.engine.scheduler import Builder

__all__ = ["BUILDERS", "ImageKinds", "WheelBuilder", "ZipappBuilder"]

# Builders by output kind; an unknown kind fails loudly in run_plan.
BUILDERS: dict[str, Builder] = {
    "wheel": WheelBuilder(),
    "zipapp": ZipappBuilder(),
    "image": ImageKinds(),
}
