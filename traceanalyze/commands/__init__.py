"""The commands, one module each; each module exposes `command` (a click command).

Commands parse options and print: the work is done by the Python API (traceanalyze/api.py).
"""

# Add a module name here when you add traceanalyze/commands/<name>.py (order = `--help` order)
COMMAND_MODULES: list[str] = ["load", "sql", "analyze", "check", "diff", "scaling", "rules", "explain", "ingest"]
