"""The engine: plan the actions of a manifest, schedule them, cache them, report them.

It knows builders only through the `Builder` protocol; the builders of each
output kind live in `shipyard.builders`.
"""

from shipyard.engine.plan import Action, Plan, Selection, Skip, host_os, make_plan, split_flag
from shipyard.engine.report import report_json, write_report
from shipyard.engine.scheduler import (
    Artifact,
    BuildContext,
    Builder,
    Event,
    Outcome,
    Result,
    run_plan,
)

__all__ = [
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
    "host_os",
    "make_plan",
    "report_json",
    "run_plan",
    "split_flag",
    "write_report",
]
