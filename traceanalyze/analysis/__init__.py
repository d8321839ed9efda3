"""Stage 3: the per-step facts computed across the tables: ranks aligned, metrics, the critical path,
efficiency (MFU, bandwidth), the parallel layout and the process-group view."""
