"""The REAPI and ByteStream protobuf messages, from a maintained package.

They are the generated modules BuildGrid publishes in `buildgrid-common` (the
`remote` extra), never copies kept in this repository: this module is the one
place that names the messages, so importing it is what needs the extra. Without the
extra, importing it raises ImportError, which `reapi.extra_needed` turns into
the error a user sees.
"""

from __future__ import annotations

from buildgrid.common.protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)
from buildgrid.common.protos.google.bytestream import bytestream_pb2 as bs_pb2
from buildgrid.common.protos.google.rpc import status_pb2

__all__ = ["bs_pb2", "re_pb2", "status_pb2"]
