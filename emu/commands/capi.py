"""`emu cc-flags`: the flags that build a C or C++ program against libemu_rt, the library
being built first if this environment has none yet (`emu.capi.build`); nothing simulated.

    cc program.c $(emu cc-flags) -o program

The text is one line for a compiler's command line; `--json` gives its parts (`cflags`,
`libs`) and where the headers and the library are.
"""

from __future__ import annotations

import argparse
from typing import Any

from emu.commands import Command, Outcome, Progress, register
from emu.commands.report import Report


def flags_work(resolved: Any, args: argparse.Namespace, progress: Progress | None) -> Outcome:
    from emu.capi import build

    include, folder = build.include_dir(), build.library_dir()
    cflags, libs = build.compile_flags(), build.link_flags()
    return Outcome({"cflags": cflags, "libs": libs, "include_dir": str(include),
                    "library": str(folder / build.LIBRARY)})


def flags_text(report: Report) -> str:
    return f"{report['cflags']} {report['libs']}"


CC_FLAGS = register(Command(
    "cc-flags", "compiler and linker flags of a C program run against the emulator",
    "Print the -I, -L, rpath and -l flags that build a C or C++ board program against emu's "
    "headers (hb_sys.h, hb_dnn.h, hb_dsp.h, hb_dsp_cv.h, dmp_dv.h, emu_rt.h) and "
    "libemu_rt, building the library with the system C compiler on first use. The program "
    "then runs on the emulated SoC: its hardware from EMU_PRESET, EMU_CONFIG and EMU_SET, "
    "its report and trace written at exit to EMU_REPORT and EMU_TRACE "
    "(docs/c_programs.md).",
    (), flags_work, flags_text, hardware=False))
