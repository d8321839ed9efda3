"""Stage 6: summaries compared: the CI gate, what moved between two runs, scaling across world sizes."""
