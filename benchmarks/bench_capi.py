"""libemu_rt's cost per call: a C program making hbSysFlushMem calls on one thread and on
four, against the same calls made from Python in-process.

Each C call crosses from the program's thread to the simulation thread and back (two
condition-variable hand-overs) and converts its arguments, on top of the Python API's own
work. Prints calls per wall second for each; skipped without a C compiler.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CALLS = 20_000

PROGRAM = r"""
#include <pthread.h>
#include <stdlib.h>
#include "hb_sys.h"
static int calls;
static void *loop(void *unused) {
  (void)unused;
  hbSysMem mem;
  if (hbSysAllocCachedMem(&mem, 4096)) exit(1);
  for (int i = 0; i < calls; ++i)
    if (hbSysFlushMem(&mem, HB_SYS_MEM_CACHE_CLEAN)) exit(1);
  return NULL;
}
int main(int argc, char **argv) {
  int threads = atoi(argv[1]);
  calls = atoi(argv[2]) / threads;
  hbSysMem warm;
  hbSysAllocMem(&warm, 64); /* the runtime starts here, outside the timed part */
  pthread_t t[16];
  for (int k = 0; k < threads; ++k) pthread_create(&t[k], NULL, loop, NULL);
  for (int k = 0; k < threads; ++k) pthread_join(t[k], NULL);
  return 0;
}
"""


def _python_rate() -> float:
    import emu
    from emu.runtime.hbsys import (
        HB_SYS_MEM_CACHE_CLEAN,
        hbSysAllocCachedMem,
        hbSysFlushMem,
        hbSysMem,
    )

    with emu.Session():
        mem = hbSysMem()
        hbSysAllocCachedMem(mem, 4096)
        start = time.perf_counter()
        for _ in range(CALLS):
            hbSysFlushMem(mem, HB_SYS_MEM_CACHE_CLEAN)
        return CALLS / (time.perf_counter() - start)


def main() -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("   skipped: no C compiler")
        return
    from emu.capi import build

    with tempfile.TemporaryDirectory() as folder:
        source, exe = Path(folder) / "calls.c", Path(folder) / "calls"
        source.write_text(PROGRAM)
        subprocess.run([cc, "-O1", str(source), *build.flags().split(), "-o", str(exe)],
                       check=True)
        for threads in (1, 4):
            # the process's start (the embedded interpreter, emu's import) timed alone first
            start = time.perf_counter()
            subprocess.run([str(exe), str(threads), str(threads)], check=True, env=os.environ)
            base = time.perf_counter() - start
            start = time.perf_counter()
            subprocess.run([str(exe), str(threads), str(CALLS)], check=True, env=os.environ)
            spent = time.perf_counter() - start - base
            print(f"   C, {threads} thread(s): {CALLS / spent:10,.0f} hbSysFlushMem calls/s "
                  f"(start-up {base:.2f} s)")
    print(f"   Python in-process:   {_python_rate():10,.0f} hbSysFlushMem calls/s")


if __name__ == "__main__":
    main()
