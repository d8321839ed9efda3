"""The native module's malloc settings (native/src/lib.rs tune_allocator): memory a stage frees
goes back to the system, and a user's own glibc malloc settings are left as they are.

Each case runs a fresh interpreter that imports the native module, then allocates, touches and
frees a 20 MB block twice through libc and reports its resident memory. Under glibc's own
defaults the first free raises the mmap threshold to the block's size, so the second block
comes from the heap and stays resident after it is freed (the reader's 8 MB blocks kept 20-35 MB
that way under every later stage); with the module's fixed thresholds it is handed back.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="the setting is glibc's malloc's")

BLOCK = 20 << 20

PROBE = f"""
import ctypes
import traceanalyze.extension  # (loads the native module)
from traceanalyze.extension import native  # noqa: F401
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
before = rss_kib()
for _ in range(2):
    p = libc.malloc({BLOCK})
    ctypes.memset(p, 1, {BLOCK})
    libc.free(p)
print(rss_kib() - before)
"""


def _kept_kib(env_extra: dict[str, str]) -> int:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and not k.startswith("MALLOC_")}
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120,
                         check=True)
    return int(out.stdout.split()[-1])


def test_a_freed_block_goes_back_to_the_system():
    kept = _kept_kib({})
    assert kept < (BLOCK >> 10) // 4, f"{kept} KiB of a freed {BLOCK >> 20} MB block stayed resident"


def test_the_users_own_malloc_settings_win():
    # (glibc.malloc.perturb=0 is glibc's default: only the presence of a malloc tunable matters,
    # and glibc's dynamic thresholds then keep the second block resident)
    kept = _kept_kib({"GLIBC_TUNABLES": "glibc.malloc.perturb=0"})
    assert kept >= (BLOCK >> 10) * 3 // 4, f"only {kept} KiB stayed: the module changed the user's malloc"
