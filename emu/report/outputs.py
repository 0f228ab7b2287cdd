"""Where a run's files go: checked before the run, put in place whole at its end.

A run's outputs (a trace file, a dump folder) are checked before any work, so a path that
cannot be written costs nothing and leaves nothing behind. They are written under a
temporary name next to the target, on the same filesystem, and renamed into place only
when complete, so a failed or interrupted run leaves no partial output.

- A file output replaces an existing regular file and nothing else: never a folder, a
  device, a named pipe, a socket or a symbolic link (emu does not write through links).
- A folder output must be new or an existing empty folder (emu deletes nothing it did not
  write); never a symbolic link or a file of any kind.
- Either needs its containing folder to exist and be writable.

Importing this module is cheap: the command line checks paths before its heavy imports.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from emu.errors import InputError
from emu.files import remove_leftovers, temporary_prefix

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
          (stat.S_ISREG, "a regular file"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"),
          (stat.S_ISSOCK, "a socket"))


def kind(path: Path) -> str | None:
    """What is at `path` itself (a link is not followed), as a phrase; None if nothing is.

    An unusable path (a file where a folder should be, no permission) raises InputError."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise InputError(f"{path}: {_folder_problem(path.parent)}") from None
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}") from None
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _folder_problem(folder: Path) -> str | None:
    """Why files cannot be created in `folder`, or None if they can."""
    try:
        mode = folder.stat().st_mode  # a link to a folder is a folder here
    except FileNotFoundError:
        return f"folder {folder} does not exist"
    except NotADirectoryError:
        blocker = next((p for p in folder.parents if p.exists() and not p.is_dir()),
                       folder)
        return f"{blocker} is not a folder"
    except OSError as exc:
        return f"folder {folder}: {exc.strerror}"
    if not stat.S_ISDIR(mode):
        return f"{folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"folder {folder} is not writable"
    return None


def _target(option: str, path: str) -> tuple[Path, str | None]:
    """`path` as a Path and what is there now."""
    if not path:
        raise InputError(f"{option}: the path is empty")
    target = Path(path)
    try:
        return target, kind(target)
    except InputError as exc:
        raise InputError(f"{option} {exc}") from None


def _need_writable_folder(option: str, path: str) -> None:
    problem = _folder_problem(Path(path).parent)
    if problem is not None:
        raise InputError(f"{option} {path}: {problem}")


def check_file(option: str, path: str, inputs: Sequence[str | Path] = ()) -> Path:
    """The output file `option` names, if a run may write it (see the module's rules); it
    must not be one of the run's `inputs` (under any name), which it would replace."""
    target, what = _target(option, path)
    if what not in (None, "a regular file"):
        raise InputError(f"{option} {path}: is {what}; only a regular file is replaced")
    if what is not None:
        for source in inputs:
            try:
                same = os.path.samefile(target, source)
            except OSError:  # an input that cannot be read is refused where it is read
                same = False
            if same:
                raise InputError(f"{option} {path}: is the input {source}; give another "
                                 f"file (emu replaces no input)")
    _need_writable_folder(option, path)
    return target


def check_folder(option: str, path: str) -> Path:
    """The output folder `option` names, if a run may create or fill it."""
    target, what = _target(option, path)
    if what == "a folder":
        try:
            empty = next(target.iterdir(), None) is None
        except OSError as exc:
            raise InputError(f"{option} {path}: {exc.strerror}") from None
        if not empty:
            raise InputError(f"{option} {path}: the folder is not empty; give a new or empty "
                             f"folder (emu replaces no earlier output)")
    elif what is not None:
        raise InputError(f"{option} {path}: is {what}; expected a new or empty folder")
    _need_writable_folder(option, path)
    return target


def refuse_special(target: Path) -> None:
    """Raise InputError unless `target` is missing or a regular file (the last check before
    a rename replaces it, as the path may have changed since the run started)."""
    what = kind(target)
    if what not in (None, "a regular file"):
        raise InputError(f"{target}: is {what}; only a regular file is replaced")


@contextlib.contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """A new temporary folder next to `target`, renamed to `target` when the block ends
    normally and removed with its contents when it raises (or is interrupted)."""
    remove_leftovers(target)  # staging folders of killed runs
    staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(target), dir=target.parent))
    try:
        yield staging
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the output is an ordinary folder
        try:
            os.replace(staging, target)  # onto nothing or an empty folder; never a link or file
        except OSError as exc:
            raise InputError(f"{target}: cannot put the output folder in place "
                             f"({exc.strerror})") from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
