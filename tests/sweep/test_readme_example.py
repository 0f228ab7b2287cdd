"""The README's sweep example: DSP clock x TCM bank size on the headline job, as a table and
a plot, locally and on a dask.distributed LocalCluster with the same results."""

from __future__ import annotations

import shutil
from pathlib import Path

import emu.sweep
from emu.cli.main import main
from emu.sweep.dask_executor import DaskExecutor

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep_dsp_clock_tcm.toml"


def test_the_readme_example_runs_writes_its_plot_and_dask_agrees(tmp_path, capsys):
    spec = tmp_path / EXAMPLE.name
    shutil.copy(EXAMPLE, spec)
    assert main(["sweep", "run", str(spec), "--workers", "2", "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "8 points" in table and "1GHz" in table
    png = tmp_path / "dsp_clock_tcm.png"
    assert main(["sweep", "plot", str(spec), "line", "--x", "vdsp.freq_hz", "--y", "dsp2_ms",
                 "--series", "vdsp.tcm.bank_bytes", "-o", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    local = emu.sweep.stored(spec, spec.with_suffix(".sqlite"))
    assert [r["status"] for r in local] == ["ok"] * 8
    # A faster DSP never makes the job slower, at either TCM size.
    for size in ("128KiB", "256KiB"):
        times = [r["metrics"]["dsp2_ms"] for r in local
                 if r["axes"]["vdsp.tcm.bank_bytes"] == size]
        assert times == sorted(times, reverse=True)
    with DaskExecutor(local_workers=2) as executor:
        remote = emu.sweep.run(spec, executor=executor)
    assert [(r["axes"], r["metrics"]) for r in remote] == [(r["axes"], r["metrics"])
                                                          for r in local]
