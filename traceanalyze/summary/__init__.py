"""Stage 5: the summary.json contract: built from the metrics and the Diagnosis (build.py), read back as
dataclasses (model.py), or taken from a source the user names (file.py)."""
