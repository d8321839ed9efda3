"""Subcommands beyond load/sql, one module each; each module exposes `command` (a click command)."""

# Add a module name here when you add traceanalyze/commands/<name>.py
COMMAND_MODULES: list[str] = ["analyze", "check", "diff", "scaling", "rules", "explain"]
