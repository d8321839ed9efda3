"""traceanalyze: which rank and which phase slows a distributed PyTorch job, why, and what to try."""

__version__ = "0.1.0"
