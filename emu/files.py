"""Files written whole or not at all: the one atomic write of the tree."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(path: str | Path, content: str | bytes) -> None:
    """Write `content` (text as UTF-8, or bytes) to `path` through a temporary file in the
    same folder renamed over it, so a failure or an interruption leaves no partial file
    (the temporary one is removed). OSError as the system gives it."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; an output is an ordinary file
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
