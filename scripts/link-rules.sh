#!/bin/sh
# traceanalyze/_builtin_rules mirrors rules/ with one symlink per file: the wheel ships the
# rule pack inside the package (maturin follows symlinked files, not symlinked folders).
# Run after adding or removing a file under rules/ (tests/test_packaging.py checks the mirror).
set -eu
cd "$(dirname "$0")/.."
rm -rf traceanalyze/_builtin_rules
find rules -type f | sort | while read -r f; do
    rel="${f#rules/}"
    mkdir -p "$(dirname "traceanalyze/_builtin_rules/$rel")"
    # up from the link's folder to the repository root: 2 + one per folder in $rel
    up="../.."$(printf '%s' "$rel" | tr -cd / | sed 's|/|/..|g')
    ln -s "$up/$f" "traceanalyze/_builtin_rules/$rel"
done
