#!/bin/sh
# Build the native trace reader (native/, Rust) in place for development: afterwards
# `PYTHONPATH=$PWD python -m traceanalyze ...` uses it. `pip install .` / `pip install -e .`
# build it through maturin instead.
set -eu
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-native/target}"
CARGO_TARGET_DIR="$target" cargo build --release --manifest-path native/Cargo.toml
# (a new file renamed into place: a running process keeps the one it loaded)
cp "$target/release/lib_native.so" traceanalyze/_native.abi3.so.tmp
mv traceanalyze/_native.abi3.so.tmp traceanalyze/_native.abi3.so
echo "built traceanalyze/_native.abi3.so"
