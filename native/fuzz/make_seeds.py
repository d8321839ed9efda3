#!/usr/bin/env python3
"""Build the fuzz seed corpus (fuzz/corpus/parse) from the real traces in fixtures/real.

Each real trace gives its first 4 KiB (a cut file: the header and the first events), a window
of events from its middle wrapped as a bare array, and, when small, the whole file (gzip
files as they are). A fixed selection, so the corpus is reproducible:

    python native/fuzz/make_seeds.py
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "fixtures" / "real"
OUT = Path(__file__).resolve().parent / "corpus" / "parse"
HEAD_BYTES = 4096
WHOLE_MAX_BYTES = 64 << 10


def seeds() -> list[bytes]:
    out = []
    for path in sorted(REAL.rglob("*.json*")):
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        out.append(text[:HEAD_BYTES])
        middle = text[len(text) // 2:]
        start = middle.find(b"\n  {")
        end = middle.find(b"\n  {", start + 1 + HEAD_BYTES)
        if start >= 0 and end > start:
            out.append(b"[" + middle[start:end].rstrip().rstrip(b",") + b"]")
        if len(raw) <= WHOLE_MAX_BYTES:
            out.append(raw)
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for data in seeds():
        (OUT / hashlib.sha1(data).hexdigest()).write_bytes(data)
    print(f"{len(list(OUT.iterdir()))} seeds in {OUT}")


if __name__ == "__main__":
    main()
