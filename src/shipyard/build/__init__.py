"""The build half of shipyard: plan, engine and the builders of each output kind."""

from shipyard.build.engine import Artifact, BuildContext, Builder, Event, Outcome, Result, run_plan
from shipyard.build.kinds import ImageKinds
from shipyard.build.plan import Action, Plan, Selection, Skip, host_os, make_plan, split_flag
from shipyard.build.report import report_json, write_report
from shipyard.build.wheel import WheelBuilder
from shipyard.build.zipapp import ZipappBuilder

__all__ = [
    "BUILDERS",
    "Action",
    "Artifact",
    "BuildContext",
    "Builder",
    "Event",
    "Outcome",
    "Plan",
    "Result",
    "Selection",
    "Skip",
    "WheelBuilder",
    "ZipappBuilder",
    "host_os",
    "make_plan",
    "report_json",
    "run_plan",
    "split_flag",
    "write_report",
]

# Builders by output kind; an unknown kind fails loudly in run_plan.
BUILDERS: dict[str, Builder] = {
    "wheel": WheelBuilder(),
    "zipapp": ZipappBuilder(),
    "image": ImageKinds(),
}
