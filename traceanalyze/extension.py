"""The compiled trace reader, `traceanalyze._native` (built from native/ by maturin).

`pip install .` puts the extension next to the *installed* package. A script run from the
repository root (or `python` / a notebook started there) imports the source folder
`traceanalyze/` instead, which has no extension unless it was built in place. Then:
- when the installed traceanalyze was installed from this very folder (PEP 610's
  `direct_url.json` names it), its extension is the one this folder builds: it is used;
- otherwise the import fails with one message that says the source folder shadows the
  installed package, and what to run.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote, urlparse

NAME = "traceanalyze._native"
PACKAGE_DIR = Path(__file__).resolve().parent


def load() -> ModuleType:
    try:
        return importlib.import_module(NAME)
    except ModuleNotFoundError as exc:
        if exc.name != NAME:
            raise
    installed = _installed_from_here()
    if installed is not None:
        return _load_from(installed)
    raise ImportError(missing_message())


def _checkout() -> Path | None:
    """The repository this package folder belongs to, when it is a source checkout."""
    root = PACKAGE_DIR.parent
    if (root / "pyproject.toml").is_file() and (root / "native" / "Cargo.toml").is_file():
        return root
    return None


def _installed_from_here() -> Path | None:
    """The extension of an installed (not editable) traceanalyze built from this checkout."""
    checkout = _checkout()
    if checkout is None:
        return None
    from importlib import metadata  # (only here: its import is a tenth of the command's start)

    try:
        dist = metadata.distribution("traceanalyze")
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError, OSError):
        return None
    url = urlparse(direct.get("url", ""))
    if url.scheme != "file" or direct.get("dir_info", {}).get("editable"):
        return None
    try:
        same = Path(unquote(url.path)).resolve() == checkout.resolve()
    except OSError:
        return None
    if not same:
        return None
    for file in dist.files or []:
        if file.parts[:1] == ("traceanalyze",) and file.name.startswith("_native") \
                and file.suffix in (".so", ".pyd"):
            path = Path(str(dist.locate_file(file))).resolve()
            if path.is_file() and path.parent != PACKAGE_DIR:
                return path
    return None


def _load_from(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(missing_message())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[NAME] = module
    return module


def missing_message() -> str:
    checkout = _checkout()
    if checkout is not None:
        return (f"traceanalyze: the source folder {PACKAGE_DIR} has no compiled reader "
                "(traceanalyze/_native) and shadows the installed package (Python imports the "
                "folder of the script, or the working folder, first). Run "
                f"`pip install -e {checkout}` to build the reader into it, or `pip install "
                f"{checkout}` if traceanalyze was installed from elsewhere, or run from "
                "another folder.")
    return (f"traceanalyze: the compiled reader traceanalyze/_native is missing from "
            f"{PACKAGE_DIR}; reinstall traceanalyze (`pip install --force-reinstall "
            "traceanalyze`).")


native = load()
