"""The engine: plan the actions of a manifest, schedule them, cache them, report them.

It knows builders only through the `Builder` protocol (`context`); the builders
of each output kind live in `shipyard.builders`. Around each builder the engine
puts its layers (`wrapper`, composed by `run.wrapped`): the action key, computed
once from the builder's declared inputs (`keys.ActionKey`), the cache and error
translation. `build.build` is the one entry that builds a plan.
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
from shipyard.engine.wrapper import Runner

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
    "Runner",
    "Selection",
    "Skip",
    "host_os",
    "make_plan",
    "read_artifacts",
    "report_json",
    "run_plan",
    "split_flag",
    "write_report",
]
