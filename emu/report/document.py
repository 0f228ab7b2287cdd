"""Run reports as JSON documents, written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu import __version__
from emu.chip import Soc
from emu.errors import InputError
from emu.files import replace_file
from emu.report.outputs import refuse_special
from emu.soc.config import ResolvedConfig, format_value, get_path, load_config

if TYPE_CHECKING:
    from emu.runtime.session import Session


def provenance(resolved: ResolvedConfig, seed: int | None = None) -> dict[str, Any]:
    """What produced a report: emu's version, the preset, the config file and overrides
    layered on it, every value that differs from the preset as a result, and the seed."""
    preset = load_config(resolved.preset)
    changed = {info.key: format_value(info, value) for info, value, _ in resolved.leaves()
               if value != get_path(preset.soc, info.key)}
    return {"emu_version": __version__, "preset": resolved.preset,
            "config_file": resolved.config_file, "overrides": list(resolved.overrides),
            "changed_from_preset": changed, "seed": seed}


def provenance_line(prov: dict[str, Any]) -> str:
    """`provenance` as the one line that heads a text report."""
    parts = [f"emu {prov['emu_version']}", f"preset {prov['preset']}"]
    if prov["config_file"]:
        parts.append(f"config {prov['config_file']}")
    if prov["overrides"]:
        parts.append("--set " + " ".join(prov["overrides"]))
    changed = prov["changed_from_preset"]
    parts.append("changed from the preset: " + ", ".join(f"{k}={v}" for k, v in changed.items())
                 if changed else "the preset unchanged")
    if prov["seed"] is not None:
        parts.append(f"seed {prov['seed']}")
    return "; ".join(parts)


def run_report(soc: Soc, command: str, results: dict[str, Any],
               seed: int | None = None) -> dict[str, Any]:
    """The report of a finished run: what was asked, on what hardware, and what happened."""
    return {
        "command": command,
        "preset": soc.resolved.preset,
        "provenance": provenance(soc.resolved, seed),
        "config": soc.resolved.to_dict(),
        "results": results,
        "stats": soc.stats_tree(),
    }


def session_report(sess: Session, command: str, results: dict[str, Any],
                   seed: int | None = None) -> dict[str, Any]:
    """`run_report` for a host program's session: its stats include the host threads'."""
    report = run_report(sess.soc, command, results, seed)
    report["stats"] = sess.stats()
    return report


def dumps(doc: Any) -> str:
    """Deterministic JSON text: fixed key order as built, no NaN, one trailing newline."""
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def write_atomic(path: str | Path, content: str | bytes) -> None:
    """Write `content` (text as UTF-8, or bytes) to `path` through a temporary file renamed
    over it, so a failure or an interruption leaves no partial file. Only a regular file is
    replaced: a folder, device, named pipe or symbolic link at `path` raises InputError
    (`emu.report.outputs`)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{target}: folder {folder} does not exist")
    refuse_special(target)
    replace_file(target, content)
