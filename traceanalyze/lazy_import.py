"""A module imported on first use (importlib.util.LazyLoader).

DuckDB's import costs a process some 15 MB resident and 40 ms. The map of a trace needs no
DuckDB (the native reader writes every table), so the load imports it when the reduce first uses
it: the reader's and the derived tables' peaks hold 15 MB less, and so does each pool worker.
`lazy_module(name)` puts a module object into sys.modules whose first attribute access runs the
real import; every later `import name` gets that object. A module already imported is returned
as it is. `loaded(name)` says whether the real import has run (an exception can only be one of
DuckDB's once it has).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING

_lock = threading.Lock()
_lazy_types: set[type] = set()  # the class of a module not yet imported (importlib's _LazyModule)


def lazy_module(name: str) -> ModuleType:
    with _lock:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader.exec_module(module)
        _lazy_types.add(type(module))
        return module


def loaded(name: str) -> bool:
    """Whether module `name` is imported (its first use has run the real import)."""
    return name in sys.modules and type(sys.modules[name]) not in _lazy_types


if TYPE_CHECKING:  # type checkers (and the dependency check) see the module itself
    import duckdb
else:
    duckdb = lazy_module("duckdb")
