"""Struct assignment copies, as in C (emu/runtime/cstruct.py), for every struct of the C APIs."""

import copy

import numpy as np
import pytest

from emu.runtime import dmp_dv, hbdnn, hbdsp, hbdsp_cv, hbsys
from emu.runtime.cstruct import CStruct
from emu.runtime.session import Session

STRUCTS = [hbsys.hbSysMem, hbdnn.hbDNNTensorShape, hbdnn.hbDNNQuantiShift,
           hbdnn.hbDNNQuantiScale, hbdnn.hbDNNTensorProperties, hbdnn.hbDNNTensor,
           hbdnn.hbDNNInferCtrlParam, hbdnn.hbDNNRoi, hbdnn.hbDNNResizeCtrlParam,
           hbdsp.hbDSPRpcCtrlParam, hbdsp_cv.hbDSPImage, dmp_dv.dmp_dv_buf,
           dmp_dv.dmp_dv_cmdraw, dmp_dv.dmp_dv_cmdraw_conv_v0_run,
           dmp_dv.dmp_dv_cmdraw_conv_v0, dmp_dv.dmp_dv_cmdraw_conv_v1,
           dmp_dv.dmp_dv_cmdraw_fc_v0, dmp_dv.dmp_dv_info_v0]
HANDLES = [hbdnn.hbPackedDNNHandle, hbdnn.hbDNNHandle, hbdnn.hbDNNTask, hbdsp.hbDSPTask,
           dmp_dv.dmp_dv_context, dmp_dv.dmp_dv_mem, dmp_dv.dmp_dv_cmdlist]


def _fields(value):
    """A struct's value as plain data, pointers (arrays, handles) by identity."""
    if isinstance(value, CStruct):
        return {k: _fields(v) for k, v in vars(value).items()}
    if isinstance(value, list):
        return [_fields(v) for v in value]
    return value if isinstance(value, int | float | str | type(None)) else id(value)


@pytest.mark.parametrize("struct", STRUCTS, ids=lambda s: s.__name__)
def test_every_struct_copies_on_assignment_and_handles_do_not(struct):
    assert issubclass(struct, CStruct)
    a = struct()
    b = copy.copy(a)
    assert b is not a and type(b) is struct and _fields(b) == _fields(a)
    for name, value in vars(a).items():
        if isinstance(value, CStruct) or name in struct.ARRAYS:  # copied, not shared
            assert getattr(b, name) is not value, name
        elif isinstance(value, list):  # a pointer field (scaleData): the same memory
            assert getattr(b, name) is value, name
    lists = [n for n, v in vars(a).items() if isinstance(v, list)]
    assert set(struct.ARRAYS) <= set(lists)


def test_handles_are_pointers_not_structs():
    assert not any(issubclass(h, CStruct) for h in HANDLES)


def test_the_tutorials_aligned_shape_line_copies_the_valid_shape():
    props = hbdnn.hbDNNTensorProperties()
    props.validShape = hbdnn.hbDNNTensorShape((1, 3, 224, 224))
    props.alignedShape = props.validShape  # C: a copy
    props.alignedShape.dimensionSize[3] = 256
    props.alignedShape.numDimensions = 4
    assert props.validShape.dimensionSize[:4] == [1, 3, 224, 224]
    assert props.alignedShape.dimensionSize[:4] == [1, 3, 224, 256]
    given = [1, 2, 3]
    shape = hbdnn.hbDNNTensorShape()
    shape.dimensionSize = given  # a C array field holds its own elements
    shape.dimensionSize[0] = 9
    assert given == [1, 2, 3]


def test_a_buffer_copied_into_a_tensor_keeps_pointing_at_the_same_memory():
    with Session("j5"):
        mem = hbsys.hbSysMem()
        assert hbsys.hbSysAllocCachedMem(mem, 64) == 0
        tensor = hbdnn.hbDNNTensor()
        tensor.sysMem[0] = mem  # C: the three fields copied
        assert tensor.sysMem[0] is not mem
        assert tensor.sysMem[0].virAddr is mem.virAddr  # a pointer: the same memory
        tensor.sysMem[0].virAddr[:4] = [1, 2, 3, 4]
        assert np.array_equal(mem.virAddr[:4], [1, 2, 3, 4])
        tensor.sysMem[0].memSize = 0  # the program's own struct is untouched
        assert mem.memSize == 64
        assert hbsys.hbSysFreeMem(mem) == 0
    props = hbdnn.hbDNNTensorProperties()
    props.scale.scaleData = [0.5, 0.25]
    tensor = hbdnn.hbDNNTensor()
    tensor.properties = props
    assert tensor.properties is not props and tensor.properties.scale is not props.scale
    assert tensor.properties.scale.scaleData is props.scale.scaleData  # a pointer field
