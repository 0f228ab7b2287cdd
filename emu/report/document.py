"""Run reports as JSON documents, written whole or not at all."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu import __version__
from emu.errors import InputError
from emu.soc.builder import Soc

if TYPE_CHECKING:
    from emu.runtime.session import Session


def run_report(soc: Soc, command: str, results: dict[str, Any]) -> dict[str, Any]:
    """The report of a finished run: what was asked, on what hardware, and what happened."""
    return {
        "emu_version": __version__,
        "command": command,
        "preset": soc.resolved.preset,
        "config": soc.resolved.to_dict(),
        "results": results,
        "stats": soc.stats_tree(),
    }


def session_report(sess: Session, command: str, results: dict[str, Any]) -> dict[str, Any]:
    """`run_report` for a host program's session: its stats include the host threads'."""
    report = run_report(sess.soc, command, results)
    report["stats"] = sess.stats()
    return report


def dumps(doc: Any) -> str:
    """Deterministic JSON text: fixed key order as built, no NaN, one trailing newline."""
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file, so a failure leaves no partial file."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{target}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; a report is an ordinary file
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
