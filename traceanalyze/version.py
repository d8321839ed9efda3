"""The tool's version (summary.json's `tool_version`, shard manifests, CI reports, `--version`).

A leaf: it imports nothing, so any stage may read it without importing the package's public
API (`traceanalyze/__init__.py` re-exports it as `traceanalyze.__version__`).
"""

__version__ = "0.1.0"
