"""The builders of streaming CPU work items."""

import numpy as np
import pytest

from emu.cpu import ops
from emu.cpu.work import Stream, copy_work, stream_work, vector_loop


def test_a_vector_loop_counts_its_body_and_its_step():
    counts = vector_loop(10, exits=3, load=4, store=1, fp=6, int=2)
    assert ops.as_dict(counts) == {"int": 10 * 2 + 10, "load": 40, "store": 10, "branch": 10,
                                   "mispredict": 3, "fp": 60, "fcvt": 0, "fdiv": 0, "fpcr": 0}
    with pytest.raises(ValueError, match="unknown instruction class"):
        vector_loop(1, neon=1)


def test_a_fraction_of_an_instruction_per_vector_is_rounded_up_on_the_loop():
    # a quarter-vector store every iteration: one store per four, the last part one too
    counts = ops.as_dict(vector_loop(9, load=1, store=0.25, fp=3))
    assert (counts["load"], counts["store"], counts["fp"]) == (9, 3, 27)
    assert (counts["int"], counts["branch"], counts["mispredict"]) == (9, 9, 1)
    assert ops.as_dict(vector_loop(0, exits=0, store=0.25)) == ops.as_dict(ops.counts())


def test_streams_touch_each_line_once_in_order_with_their_ids():
    work = stream_work("w", ops.counts(), [Stream(1000, 100, stream_id=1),
                                            Stream(4096, 130, store=True, stream_id=2)], 64)
    assert work.addrs.tolist() == [960, 1024, 1088, 4096, 4160, 4224]
    assert work.is_write.tolist() == [False] * 3 + [True] * 3
    # A store writes a whole line only where the range covers it: not the tail of 4224.
    assert work.full_line.tolist() == [False] * 3 + [True, True, False]
    assert work.streams.tolist() == [1, 1, 1, 2, 2, 2]


def test_stores_known_by_the_lines_they_changed_write_no_whole_line():
    work = stream_work("w", ops.counts(), [Stream(0, 256, store=True, whole_lines=False)], 64)
    assert work.is_write.all() and not work.full_line.any()


def test_empty_ranges_touch_nothing_and_no_streams_make_a_plain_item():
    work = stream_work("w", ops.counts(), [Stream(100, 0, store=True)], 64)
    assert work.addrs is not None and len(work.addrs) == 0
    assert stream_work("w", ops.counts(int=1), [], 64).addrs is None
    with pytest.raises(ValueError, match="0-255"):
        Stream(0, 1, stream_id=256)


def test_a_copy_is_a_load_and_a_store_per_vector_over_the_buffer_lines():
    work = copy_work("memcpy", 8192, 200, store=True, vector_bytes=16, line_bytes=64)
    assert ops.as_dict(work.ops) == {"int": 13, "load": 13, "store": 13, "branch": 13,
                                     "mispredict": 1, "fp": 0, "fcvt": 0, "fdiv": 0, "fpcr": 0}
    assert work.addrs.tolist() == [8192, 8256, 8320, 8384]
    assert work.full_line.tolist() == [True, True, True, False]
    read = copy_work("memcpy", 8192, 200, store=False, vector_bytes=16, line_bytes=64)
    assert not read.is_write.any() and not read.full_line.any()
    assert np.array_equal(read.addrs, work.addrs)
