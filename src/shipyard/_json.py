"""Reading JSON that others wrote (a registry's answers, the documents of a layout, an
archive or a remote cache entry): one parser call, and what it may not throw.

json descends one Python frame per level of nesting, so `[[[[...` a few thousand levels
deep raises RecursionError, which no caller expects from a parser and which would end
shipyard with a traceback. Here it becomes the `ValueError` (a `json.JSONDecodeError`,
as for any other bytes that are not JSON) every caller already turns into its own typed
error. What the document holds is still the caller's to check: a parse gives `Any`.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["loads"]


def loads(data: bytes | str) -> Any:
    """`json.loads(data)`; nesting too deep for the parser raises `json.JSONDecodeError`
    instead of RecursionError (bytes that are not UTF-8 raise UnicodeDecodeError, a
    ValueError too)."""
    try:
        return json.loads(data)
    except RecursionError:
        pass  # out of the except block first: the error is raised on a shallow stack
    raise json.JSONDecodeError("values nested too deeply to read", "", 0)
