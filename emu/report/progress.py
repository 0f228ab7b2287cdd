"""A progress bar on stderr for long runs, for a person watching a terminal.

It is shown only when stderr is a terminal, `--quiet` was not given, and the output is not
JSON going somewhere other than a terminal (a pipe or a file wants the document alone, and
its reader is a program). The library reports progress through a plain callback,
`progress(done, total, what)`; this module turns it into a `rich` bar that disappears when
the run ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TextIO

ProgressFn = Callable[[int, int, str], None]


def wanted(*, quiet: bool, json_output: bool, stdout: TextIO, stderr: TextIO) -> bool:
    """Whether a bar should be drawn for this command's run."""
    return not quiet and stderr.isatty() and not (json_output and not stdout.isatty())


@contextlib.contextmanager
def bar(label: str, enabled: bool, stderr: TextIO) -> Iterator[ProgressFn | None]:
    """A progress callback drawing a bar on `stderr`, or None when `enabled` is false."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=Console(file=stderr), transient=True) as progress:
        task = progress.add_task(label, total=None)

        def update(done: int, total: int, what: str) -> None:
            progress.update(task, completed=done, total=total, description=f"{label}: {what}")

        yield update
