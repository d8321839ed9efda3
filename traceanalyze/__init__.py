"""traceanalyze: which rank and which phase slows a distributed PyTorch job.

    import traceanalyze
    a = traceanalyze.analyze("runs/job42")     # an Analysis: .verdict, .findings, .sql(), ...

Everything imported here is the public, typed API (see docs/python-api.md).
This module is the top of the import layers: no module of the package imports it (a stage
reads the version from `traceanalyze.version`; see ARCHITECTURE.md, "Import layers").
"""

import sys
import types

from traceanalyze.api import Analysis, analyze, diff, scaling
from traceanalyze.errors import TraceanalyzeError, TraceConfigError, TraceError, TraceFormatError
from traceanalyze.findings import Cost, Finding
from traceanalyze.summary_model import Summary
from traceanalyze.version import __version__

__all__ = ["Analysis", "Cost", "Finding", "Summary", "TraceConfigError", "TraceError",
           "TraceFormatError", "TraceanalyzeError", "__version__", "analyze", "diff", "scaling"]

_API_NAMES = {"diff": diff, "scaling": scaling}


class _Package(types.ModuleType):
    """`traceanalyze.diff` and `traceanalyze.scaling` stay the API functions after their
    same-named modules are imported (`from traceanalyze.diff import ...` still works)."""

    def __setattr__(self, name, value):
        if name in _API_NAMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
