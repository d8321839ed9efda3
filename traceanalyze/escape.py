"""Strings from a trace or a summary.json, escaped for the place they are printed.

One function per sink, used by every writer of that sink:
  - `terminal(text)`: a terminal (verdict, warnings, `sql` tables, error lines). Control
    characters (C0, DEL, C1: ESC/OSC sequences, carriage returns, newlines, ...) and the
    Unicode line/paragraph separators become visible escapes (`\\n`, `\\x1b`, `\\u2028`), so
    a trace cannot move the cursor, retitle the window or forge a line.
  - `ci_line(text)`: one line of a CI log (gate text, JUnit, SARIF messages). Whitespace
    runs (line breaks included) become one space, other controls escaped as by `terminal`
    (so no line can be forged), and a leading `::`, which the GitHub Actions runner reads as
    a workflow command (`::error ...`; it trims leading spaces, then looks for `::`), is
    broken up. `::` inside a line stays (C++ names such as `at::native::f`).
  - `shell_arg(text)`: a word of a command line the user is invited to copy (shlex.quote),
    with `terminal` applied so the quoted word also prints safely.
"""

from __future__ import annotations

import re
import shlex

# C0 controls, DEL, C1 controls, and the Unicode line breaks some terminals and CI logs honour
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u0085]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# a workflow command is a line starting with `::name`; a word joiner between the colons keeps
# the text readable and the runner blind to it
_WORKFLOW = re.compile(r"^(\s*):(?=:)")
_WORKFLOW_BREAK = "\\1:\u2060"


def _visible(match: re.Match) -> str:
    ch = match.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal(text) -> str:
    """`text` with every control character shown as an escape (safe to print on a TTY)."""
    return _CONTROL.sub(_visible, str(text))


def ci_line(text) -> str:
    """`text` as one line of a CI log: no control characters, no workflow command."""
    one_line = " ".join(str(text).split())  # line breaks (CR, LF, U+2028, ...) -> one space
    return _WORKFLOW.sub(_WORKFLOW_BREAK, terminal(one_line), count=1)


def has_workflow_command(output: str) -> bool:
    """Whether a CI log line could be read as a GitHub workflow command (for tests and checks)."""
    return any(line.lstrip().startswith("::") for line in output.splitlines())


def shell_arg(text) -> str:
    """A path or word quoted for a POSIX shell (what the user copies runs nothing else)."""
    return terminal(shlex.quote(str(text)))


def deep(value, escape):
    """Every string inside `value` (dicts, lists, tuples; keys too) passed through `escape`."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {deep(k, escape): deep(v, escape) for k, v in value.items()}
    if isinstance(value, list):
        return [deep(v, escape) for v in value]
    if isinstance(value, tuple):
        return tuple(deep(v, escape) for v in value)
    return value
