"""The session a C program runs on: its hardware from the environment, its report and trace
written when the process exits.

    EMU_PRESET   the preset (default j5)
    EMU_CONFIG   a configuration file layered on it (as `--config`)
    EMU_SET      overrides, whitespace-separated KEY=VALUE items (as `--set`)
    EMU_REPORT   write the run's JSON report here at exit (the session's stats, with the
                 host threads', and the configuration)
    EMU_TRACE    write the run's Chrome/Perfetto trace here at exit

A value the configuration refuses stops the program at its first runtime call with one line
on stderr naming the variable, and exit status 2: a run on hardware other than the one
asked for would report numbers for the wrong chip.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from emu.errors import EmuError
from emu.runtime.session import Session

ENV_PRESET, ENV_CONFIG, ENV_SET = "EMU_PRESET", "EMU_CONFIG", "EMU_SET"
ENV_REPORT, ENV_TRACE = "EMU_REPORT", "EMU_TRACE"


def make_session() -> Session:
    """The program's board, as the environment describes it (`EmuError` if it cannot)."""
    preset = os.environ.get(ENV_PRESET, "").strip() or "j5"
    config = os.environ.get(ENV_CONFIG, "").strip() or None
    overrides = os.environ.get(ENV_SET, "").split()
    try:
        return Session(preset, config, overrides, trace=bool(os.environ.get(ENV_TRACE)))
    except EmuError as exc:
        named = ENV_SET if overrides else ENV_CONFIG if config else ENV_PRESET
        raise EmuError(f"{named}: {exc}") from exc


def program_name() -> str:
    """The program's file name (argv[0] without its folder), as the report names it."""
    try:
        argv0 = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return "program"
    return os.fsdecode(argv0).rsplit("/", 1)[-1] or "program"


def results(sess: Session) -> dict[str, Any]:
    """What a C program's report says at the top: what ran and how long, simulated."""
    threads = [t for t in sess.threads if not t.daemon]
    return {"program": program_name(), "simulated_ps": sess.now_ps,
            "simulated_ms": sess.now_ps / 1e9, "program_threads": len(threads)}


def finish(sess: Session) -> None:
    """Write the report and trace the environment asks for (the process is exiting)."""
    from emu.report.document import dumps, session_report, write_atomic
    from emu.report.trace import chrome_trace_many

    try:
        report_path = os.environ.get(ENV_REPORT)
        if report_path:
            write_atomic(report_path, dumps(session_report(sess, "c-program", results(sess))))
        trace_path = os.environ.get(ENV_TRACE)
        if trace_path:
            about = {"preset": sess.soc.resolved.preset, "program": program_name()}
            write_atomic(trace_path, dumps(chrome_trace_many(
                [("", sess.soc.recorder.recording)], about)))
    except (EmuError, OSError) as exc:
        print(f"emu: {exc}", file=sys.stderr, flush=True)
