"""A load's memory: the malloc settings the loader asks of the native module before a big trace
(native/src/lib.rs tune_allocator: memory a stage frees goes back to the system, a user's own
glibc malloc settings are left as they are), and where a rank's work files go
(load/memory.py: RAM only where it has room).

Each malloc case runs a fresh interpreter that imports the native module (and asks for the
settings or not), then allocates, touches and frees a 20 MB block twice through libc and
reports its resident memory. Under glibc's own defaults the first free raises the mmap threshold
to the block's size, so the second block comes from the heap and stays resident after it is
freed (the reader's 8 MB blocks kept 20-35 MB that way under every later stage); with the fixed
thresholds it is handed back. Another frees a 4 MB block under a live one (a hole in the heap,
never its free top): mapped from 1 MB up, it is handed back too.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

import pytest

from traceanalyze.load import memory
from traceanalyze.load.discover import TraceFile

GLIBC = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="the setting is glibc's malloc's")

BLOCK = 20 << 20

# (the probe's start: `{setup}` runs before the native module's settings are asked or not)
PROBE = """
import ctypes
libc = ctypes.CDLL("libc.so.6")
{setup}
import traceanalyze.extension  # (loads the native module)
from traceanalyze.extension import native
if {tune}:
    native.tune_allocator()
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
before = rss_kib()
"""

FREED_TWICE = """
for _ in range(2):
    p = libc.malloc({block})
    ctypes.memset(p, 1, {block})
    libc.free(p)
print(rss_kib() - before)
"""

# (a live block above it, bigger than any free one below: its pages are not the heap's free top)
FREED_UNDER_A_LIVE_ONE = """
p = libc.malloc({block})
ctypes.memset(p, 1, {block})
pin = libc.malloc(256 << 10)
ctypes.memset(pin, 1, 256 << 10)
libc.free(p)
print(rss_kib() - before)
"""


def _kept_kib(env_extra: dict[str, str], tune: bool = True, body: str = FREED_TWICE, block: int = BLOCK,
              setup: str = "") -> int:
    """KiB still resident in a fresh interpreter after `body` freed its `block` bytes."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and not k.startswith("MALLOC_")}
    env.update(env_extra)
    code = PROBE.format(setup=setup, tune=tune) + body.format(block=block)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=True)
    return int(out.stdout.split()[-1])


@GLIBC
def test_a_freed_block_goes_back_to_the_system():
    kept = _kept_kib({})
    assert kept < (BLOCK >> 10) // 4, f"{kept} KiB of a freed {BLOCK >> 20} MB block stayed resident"


HOLE = 4 << 20  # (a column or a text block of the reader's: under 32 MB, over 1 MB)
OLD_MMAP_THRESHOLD = 32 << 20  # (what tune_allocator set before it mapped from 1 MB up)


@GLIBC
def test_a_freed_block_below_a_live_one_goes_back():
    # (a stage's freed block under the next stage's small live ones: from the heap it stayed
    # resident, a hole no trim of the top returns; mapped, it goes back when freed)
    kept = _kept_kib({}, body=FREED_UNDER_A_LIVE_ONE, block=HOLE)
    assert kept < (HOLE >> 10) // 4, f"{kept} KiB of a freed {HOLE >> 20} MB block stayed resident"
    # (mapped only from 32 MB, the setting before: the same block stays, so the probe does see a hole)
    kept_before = _kept_kib({}, tune=False, body=FREED_UNDER_A_LIVE_ONE, block=HOLE,
                            setup=f"libc.mallopt(-3, {OLD_MMAP_THRESHOLD})  # (M_MMAP_THRESHOLD)")
    assert kept_before >= (HOLE >> 10) * 3 // 4


@GLIBC
def test_the_users_own_malloc_settings_win():
    # (glibc.malloc.perturb=0 is glibc's default: only the presence of a malloc tunable matters,
    # and glibc's dynamic thresholds then keep the second block resident)
    kept = _kept_kib({"GLIBC_TUNABLES": "glibc.malloc.perturb=0"})
    assert kept >= (BLOCK >> 10) * 3 // 4, f"only {kept} KiB stayed: the module changed the user's malloc"


@GLIBC
def test_importing_the_module_changes_nothing():
    # (a process mapping many small ranks keeps glibc's defaults: read.TUNE_ALLOCATOR_MIN_BYTES)
    kept = _kept_kib({}, tune=False)
    assert kept >= (BLOCK >> 10) * 3 // 4, f"only {kept} KiB stayed: the import changed malloc"


# -- where a rank's work files go (load/memory.py) --------------------------------------------

def _trace(tmp_path, size_bytes: int):
    path = tmp_path / "rank0.json"
    path.write_text("{}")
    return TraceFile(path, 0, "file name", None, None, size_bytes, 0)


def test_a_small_ram_folder_is_not_chosen_for_a_trace_it_cannot_hold(tmp_path, monkeypatch):
    """A container's /dev/shm is often its own 64 MB file system (Docker's default) while the
    machine has gigabytes free: a trace's work files go to the temp folder when the RAM folder
    cannot hold four times the trace. (A real folder stands in for /dev/shm: its free space is
    the disk's, far above four times a 1 MB trace; the small file system's is then given.)"""
    monkeypatch.delenv("TRACEANALYZE_TMPDIR", raising=False)
    ram = tmp_path / "shm"
    ram.mkdir()
    monkeypatch.setattr(memory, "RAM_STAGING_DIR", ram)
    trace = _trace(tmp_path, 1 << 20)
    assert memory.available_memory_bytes() > 4 * (1 << 20)  # (a machine that runs the suite has 4 MB)
    assert memory.staging_dir([trace]) == str(ram)  # (room: the RAM folder)
    monkeypatch.setattr(memory, "free_bytes", lambda folder: 3 << 20)  # (under four times 1 MB)
    assert memory.staging_dir([trace]) is None


def test_free_bytes_of_a_real_folder(tmp_path):
    # (statvfs and shutil.disk_usage read the same file system; the two calls are moments apart)
    assert abs(memory.free_bytes(tmp_path) - shutil.disk_usage(tmp_path).free) < 256 << 20
    assert memory.free_bytes(tmp_path / "missing") == 0


MAP_PROBE = """
import json, sys
from pathlib import Path
from traceanalyze.load.discover import identify
from traceanalyze.load.map import map_rank
manifest = map_rank(identify(Path(sys.argv[1]), only_file=True), sys.argv[2])
print(json.dumps({"duckdb_loaded": "_duckdb" in sys.modules, "raw_events": manifest["rows"]["raw_events"]}))
"""


def test_mapping_a_rank_loads_no_duckdb(tmp_path):
    # The map of a well-formed rank is the native reader's alone: DuckDB's library (some 15 MB
    # resident in each process, under the reader's peak) is never loaded. Every event
    # of the trace is in its shard: the count is the JSON's own, counted here.
    import gzip
    import json
    from pathlib import Path

    trace = min((Path(__file__).parents[1] / "fixtures" / "ddp" / "balanced").glob("rank0.*.json.gz"))
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    out = subprocess.run([sys.executable, "-c", MAP_PROBE, str(trace), str(tmp_path / "shards")],
                         capture_output=True, text=True, timeout=300, check=True)
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["duckdb_loaded"] is False
    assert report["raw_events"] == len(events)


DUCKDB_PROBE = """
import json
import traceanalyze.db as tracedb
from traceanalyze.lazy_import import duckdb
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
con = duckdb.connect(config={"threads": 1})
start = rss_kib()
con.execute("CREATE TABLE t AS SELECT range AS i, md5(range::VARCHAR) AS s FROM range(1000000)")
con.execute("SELECT s, count(*) FROM t GROUP BY s ORDER BY 2 DESC LIMIT 3").fetchall()
con.execute("DROP TABLE t")
used = rss_kib()
tracedb.release_freed_memory(con)
print(json.dumps({"grown_kib": used - start, "kept_kib": rss_kib() - start,
                  "threads": con.execute("SELECT current_setting('threads')").fetchone()[0]}))
"""


def test_duckdb_hands_back_what_its_statements_freed():
    # A table and a grouping of a million rows, dropped: DuckDB's allocator keeps their memory
    # for later statements until the reduce asks for it back (db.release_freed_memory, after
    # each cross-rank file); then most of it is gone, and the connection keeps its one thread.
    import json

    out = subprocess.run([sys.executable, "-c", DUCKDB_PROBE], capture_output=True, text=True, timeout=300,
                         check=True)
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["grown_kib"] > 50 << 10  # (the statements used memory to give back: over 50 MB)
    assert report["kept_kib"] < report["grown_kib"] / 4
    assert report["threads"] == 1
