"""Stage 4: the rules: config and rule pack in, a Diagnosis (findings, one per root cause) out."""
