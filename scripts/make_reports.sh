#!/usr/bin/env bash
# Regenerate the example reports: reports/examples/<scenario>/report.html + summary.json for every
# recorded fixture scenario (fixtures/ddp/<scenario>/), so a newcomer can open one without
# installing anything. trace.duckdb is written too (the copyable SQL in the report runs on it)
# but is git-ignored.
#
#   scripts/make_reports.sh                  # every scenario that has trace files
#   scripts/make_reports.sh input_straggler  # only the named ones
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -gt 0 ]; then
    scenarios=("$@")
else
    scenarios=()
    for dir in fixtures/ddp/*/; do
        scenarios+=("$(basename "$dir")")
    done
fi

failed=0
for name in "${scenarios[@]}"; do
    src="fixtures/ddp/$name"
    if ! compgen -G "$src/*.pt.trace.json*" >/dev/null; then
        echo "skip   $name (no trace files in $src)"
        continue
    fi
    if python3 -m traceanalyze "$src" --out "reports/examples/$name" --quiet >/dev/null; then
        echo "wrote  reports/examples/$name/report.html"
    else
        echo "FAILED $name" >&2
        failed=1
    fi
done
exit "$failed"
