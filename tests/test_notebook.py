"""The example notebook, executed on a real Jupyter kernel as a user would run it."""

from __future__ import annotations

import html
import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "analyze_a_trace.ipynb"


def test_example_notebook_runs_and_shows_the_verdict(monkeypatch):
    # the kernel is a subprocess: it imports this checkout's traceanalyze
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    verdict = text.split("collective-straggler error")[0]
    verdict = " ".join(verdict.split())  # (the terminal text wraps its lines)
    assert "rank 2" in verdict and "(cause: input" in verdict
    # the first cell's rich output: the findings and the step timeline inline
    page = outputs[0]["data"]["text/html"]
    assert "collective-straggler" in page and "<svg" in page and "<script" not in page
    assert html.escape("rank 2 is late at the all_reduce") in page
    # the DataFrame of the SQL cell: one row per rank, 6 aligned steps each (the verdict says 2-7)
    table = next(o["data"]["text/plain"] for o in outputs
                 if o.output_type == "execute_result" and "median_step_ms" in o["data"]["text/plain"])
    assert "shape: (4, 3)" in table
    assert "(2-7)" in verdict
