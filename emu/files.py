"""Files written whole or not at all: the one atomic write of the tree.

An output is first written to a hidden temporary next to it, `.NAME.emu-PID-RANDOM` (PID the
writing process), then renamed over it. A process killed before the rename (SIGKILL, a power
cut) cannot remove its temporary; the next write of the same output does: it removes every
such temporary whose process is gone, and leaves those of live processes (another emu
writing the same output at the same time) alone. A folder is looked through once per process
(the first write into it removes the dead temporaries of every output there), so writing
thousands of files into one folder (a dump) does not read the folder thousands of times.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path


def temporary_prefix(target: Path) -> str:
    """The start of the name of this process's temporaries for `target`."""
    return f".{target.name}.emu-{os.getpid()}-"


_LEFTOVER = re.compile(r"\..+\.emu-(\d+)-[^/]+")
"""A temporary's name: `temporary_prefix` and mkstemp's random part."""
_LOOKED_THROUGH: set[str] = set()
"""Folders whose leftovers this process has removed."""


def remove_leftovers(target: Path) -> None:
    """Remove the temporaries (files or folders) that killed emu processes left next to
    `target`, once per folder and process (module docstring)."""
    folder = target.parent if str(target.parent) else Path(".")
    key = os.path.abspath(folder)
    if key in _LOOKED_THROUGH:
        return
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return  # the write itself will say what is wrong with the folder
    _LOOKED_THROUGH.add(key)
    for entry in entries:
        match = _LEFTOVER.fullmatch(entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            Path(entry.path).unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or a number no process has: keep it
    return True


def replace_file(path: str | Path, content: str | bytes) -> None:
    """Write `content` (text as UTF-8, or bytes) to `path` through a temporary file in the
    same folder renamed over it, so a failure or an interruption leaves no partial file
    (the temporary one is removed; one a killed process left is removed by the next write).
    OSError as the system gives it."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    remove_leftovers(target)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(target), dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; an output is an ordinary file
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
