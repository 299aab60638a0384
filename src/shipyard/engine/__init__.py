"""The engine: plan the actions of a manifest, schedule them, cache them, report them.

It knows builders only through the `Builder` protocol (`context`); the builders
of each output kind live in `shipyard.builders`. Around each builder the engine
puts one wrapper (`wrapper.Wrapped`): the action key, computed once from the
builder's declared inputs (`keys.ActionKey`), the cache and error translation.
"""

from shipyard.engine.keys import ActionKey
from shipyard.engine.plan import Action, Plan, Selection, Skip, host_os, make_plan, split_flag
from shipyard.engine.report import read_artifacts, report_json, write_report
from shipyard.engine.scheduler import (
    Artifact,
    BuildContext,
    Builder,
    Event,
    Outcome,
    Result,
    run_plan,
)
from shipyard.engine.wrapper import Wrapped

__all__ = [
    "Action",
    "ActionKey",
    "Artifact",
    "BuildContext",
    "Builder",
    "Event",
    "Outcome",
    "Plan",
    "Result",
    "Selection",
    "Skip",
    "Wrapped",
    "host_os",
    "make_plan",
    "read_artifacts",
    "report_json",
    "run_plan",
    "split_flag",
    "write_report",
]
