"""Stage 6: renderers (terminal, JSON, HTML, CI formats) of the analysis results."""
