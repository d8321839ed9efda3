"""traceanalyze: which rank and which phase slows a distributed PyTorch job.

    import traceanalyze
    a = traceanalyze.analyze("runs/job42")     # an Analysis: .verdict, .findings, .sql(), ...

Everything imported here is the public, typed API (see docs/python-api.md).
This module is the top of the import layers: no module of the package imports it (a stage
reads the version from `traceanalyze.version`; see ARCHITECTURE.md, "Import layers").
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING

from traceanalyze.errors import TraceanalyzeError, TraceConfigError, TraceError, TraceFormatError
from traceanalyze.version import __version__

if TYPE_CHECKING:
    from traceanalyze.api import Analysis, analyze, diff, scaling
    from traceanalyze.findings import Cost, Finding
    from traceanalyze.summary.model import Summary

# imported on first use: a command such as `traceanalyze load` needs none of the analysis
_LAZY = {"Analysis": "traceanalyze.api", "analyze": "traceanalyze.api", "diff": "traceanalyze.api",
         "scaling": "traceanalyze.api", "Cost": "traceanalyze.findings", "Finding": "traceanalyze.findings",
         "Summary": "traceanalyze.summary.model"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # (past _Package.__setattr__, which keeps submodules out)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["Analysis", "Cost", "Finding", "Summary", "TraceConfigError", "TraceError",
           "TraceFormatError", "TraceanalyzeError", "__version__", "analyze", "diff", "scaling"]

_API_NAMES = ("diff", "scaling")


class _Package(types.ModuleType):
    """`traceanalyze.compare.diff` and `traceanalyze.compare.scaling` stay the API functions after their
    same-named modules are imported (`from traceanalyze.compare.diff import ...` still works)."""

    def __setattr__(self, name, value):
        if name in _API_NAMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
