"""Releases: preflight, build, validate, stage, publish and verify, as one pipeline."""

from shipyard.release.context import ReleaseContext, ReleaseOptions, Stage, StageResult
from shipyard.release.index import PackageIndex, PackageIndexError, index_from_env
from shipyard.release.journal import Journal
from shipyard.release.pipeline import PIPELINE, prepare_release, release, run_pipeline
from shipyard.release.publish import PublishError

__all__ = [
    "PIPELINE",
    "Journal",
    "PackageIndex",
    "PackageIndexError",
    "PublishError",
    "ReleaseContext",
    "ReleaseOptions",
    "Stage",
    "StageResult",
    "index_from_env",
    "prepare_release",
    "release",
    "run_pipeline",
]
