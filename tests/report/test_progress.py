import io

import pytest

from emu.report import progress
from emu.workloads import cameras
from emu.workloads.pointcloud import runner
from emu.workloads.pointcloud.params import POINTPILLARS


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize(("quiet", "json_output", "stdout_tty", "stderr_tty", "shown"), [
    (False, False, True, True, True),
    (False, False, False, True, True),   # a table piped on: the bar is for the person
    (False, True, True, True, True),     # JSON read on the terminal
    (False, True, False, True, False),   # JSON into a file or a pipe
    (True, False, True, True, False),    # --quiet
    (False, False, True, False, False),  # stderr is not a terminal
])
def test_the_bar_is_drawn_only_for_a_person_watching(quiet, json_output, stdout_tty, stderr_tty,
                                                      shown):
    assert progress.wanted(quiet=quiet, json_output=json_output, stdout=_Stream(stdout_tty),
                           stderr=_Stream(stderr_tty)) is shown


def test_a_bar_that_is_not_wanted_writes_nothing():
    stderr = _Stream(True)
    with progress.bar("x", False, stderr) as update:
        assert update is None
    assert stderr.getvalue() == ""


def test_a_drawn_bar_takes_updates():
    stderr = _Stream(True)
    with progress.bar("work", True, stderr) as update:
        assert update is not None
        update(1, 2, "half")
        update(2, 2, "all")
    assert "work" in stderr.getvalue()


def test_runs_report_every_step_of_their_progress():
    seen = []
    frames = runner.synthetic(POINTPILLARS, 2, 0, 2000)
    runner.run("pointpillars", ["cpu", "dsp2"], frames,
               progress=lambda done, total, what: seen.append((done, total, what)))
    assert seen == [(1, 4, "cpu 1/2"), (2, 4, "cpu 2/2"), (3, 4, "dsp2 1/2"),
                    (4, 4, "dsp2 2/2")]
    steps = []
    cameras.run(cameras.CameraParams(cameras=2, frames=2),
                progress=lambda done, total, what: steps.append((done, total)))
    assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)]
