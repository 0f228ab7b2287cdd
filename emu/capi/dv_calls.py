"""libemu_rt's dmp_dv functions (`dmp_dv.h`): handles as opaque pointers, the mapped memory
as the pointer of the very array the Python driver reconciles with the device, raw
commands read by their header (size, device type, version) into the Python structs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from emu.capi.calls import NULL, Runtime, export
from emu.runtime import dmp_dv
from emu.runtime.cstruct import CStruct

EINVAL = dmp_dv.EINVAL
_int = export(EINVAL, EINVAL)  # returns a status
_handle = export(NULL, NULL)  # returns a handle or a string, NULL on failure
_void = export(None, None)  # returns nothing
_size = export(0, 0)  # returns a size


@export(refused=NULL, failed=NULL, direct=True)
def dmp_dv_get_version_string(rt: Runtime) -> Any:
    return rt.string(dmp_dv.dmp_dv_get_version_string())


@_handle
def dmp_dv_get_last_error_message(rt: Runtime) -> Any:
    return rt.string(dmp_dv.dmp_dv_get_last_error_message())


def _made(rt: Runtime, handle: Any) -> Any:
    return rt.ffi.NULL if handle is None else rt.pointer(handle)


@_handle
def dmp_dv_context_create(rt: Runtime) -> Any:
    return _made(rt, dmp_dv.dmp_dv_context_create())


@_void
def dmp_dv_context_release(rt: Runtime, ctx: Any) -> None:
    dmp_dv.dmp_dv_context_release(rt.handle(ctx))


@_void
def dmp_dv_context_retain(rt: Runtime, ctx: Any) -> None:
    dmp_dv.dmp_dv_context_retain(rt.handle(ctx))


@_handle
def dmp_dv_context_get_info_string(rt: Runtime, ctx: Any) -> Any:
    return rt.string(dmp_dv.dmp_dv_context_get_info_string(rt.handle(ctx)))


_INFO_FIELDS = ("ub_size", "max_kernel_size", "conv_freq", "fc_freq", "max_fc_vector_size")


@_int
def dmp_dv_context_get_info(rt: Runtime, ctx: Any, info: Any) -> int:
    if rt.null(info):
        return int(dmp_dv.dmp_dv_context_get_info(rt.handle(ctx), None))
    made = dmp_dv.dmp_dv_info_v0()
    made.size, made.version = int(info.size), int(info.version)
    rc = int(dmp_dv.dmp_dv_context_get_info(rt.handle(ctx), made))
    if rc == 0:
        info.version = made.version
        full = rt.ffi.cast("dmp_dv_info_v0 *", info)
        for k, name in enumerate(_INFO_FIELDS):
            if made.size >= 12 + 4 * k:  # only what the caller's struct holds
                setattr(full, name, getattr(made, name))
    return rc


@export(refused=-1, failed=-1)
def dmp_dv_fpga_device_exists(rt: Runtime, ctx: Any, dev_type_id: int) -> int:
    return int(dmp_dv.dmp_dv_fpga_device_exists(rt.handle(ctx), int(dev_type_id)))


@_handle
def dmp_dv_mem_alloc(rt: Runtime, ctx: Any, size: int) -> Any:
    return _made(rt, dmp_dv.dmp_dv_mem_alloc(rt.handle(ctx), int(size)))


@_void
def dmp_dv_mem_release(rt: Runtime, mem: Any) -> None:
    dmp_dv.dmp_dv_mem_release(rt.handle(mem))


@_void
def dmp_dv_mem_retain(rt: Runtime, mem: Any) -> None:
    dmp_dv.dmp_dv_mem_retain(rt.handle(mem))


@_handle
def dmp_dv_mem_map(rt: Runtime, mem: Any) -> Any:
    view = dmp_dv.dmp_dv_mem_map(rt.handle(mem))
    if view is None:
        return rt.ffi.NULL
    # kept for the process: a pointer used after an unmap reaches old bytes, not freed ones
    rt.keep(("map", id(view)), lambda: view)
    return rt.ffi.cast("uint8_t *", view.ctypes.data)


@_void
def dmp_dv_mem_unmap(rt: Runtime, mem: Any) -> None:
    dmp_dv.dmp_dv_mem_unmap(rt.handle(mem))


@_int
def dmp_dv_mem_sync_start(rt: Runtime, mem: Any, rd: int, wr: int) -> int:
    return int(dmp_dv.dmp_dv_mem_sync_start(rt.handle(mem), int(rd), int(wr)))


@_int
def dmp_dv_mem_sync_end(rt: Runtime, mem: Any) -> int:
    return int(dmp_dv.dmp_dv_mem_sync_end(rt.handle(mem)))


@_size
def dmp_dv_mem_get_size(rt: Runtime, mem: Any) -> int:
    return int(dmp_dv.dmp_dv_mem_get_size(rt.handle(mem)))


@_size
def dmp_dv_mem_get_total_size(rt: Runtime) -> int:
    return int(dmp_dv.dmp_dv_mem_get_total_size())


@_handle
def dmp_dv_cmdlist_create(rt: Runtime, ctx: Any) -> Any:
    return _made(rt, dmp_dv.dmp_dv_cmdlist_create(rt.handle(ctx)))


@_void
def dmp_dv_cmdlist_release(rt: Runtime, cmdlist: Any) -> None:
    dmp_dv.dmp_dv_cmdlist_release(rt.handle(cmdlist))


@_void
def dmp_dv_cmdlist_retain(rt: Runtime, cmdlist: Any) -> None:
    dmp_dv.dmp_dv_cmdlist_retain(rt.handle(cmdlist))


def _struct_in(rt: Runtime, made: CStruct, c: Any) -> CStruct:
    """Fill the Python struct `made` from the C struct `c`, field by field (nested structs
    and arrays alike; a buffer's memory handle through the handle table)."""
    for name, value in vars(made).items():
        field = getattr(c, name)
        if isinstance(value, dmp_dv.dmp_dv_buf):
            setattr(made, name, dmp_dv.dmp_dv_buf(
                None if rt.null(field.mem) else rt.handle(field.mem), int(field.offs)))
        elif isinstance(value, CStruct):
            setattr(made, name, _struct_in(rt, value, field))
        elif isinstance(value, list):
            setattr(made, name, [_struct_in(rt, v, field[k]) if isinstance(v, CStruct)
                                 else int(field[k]) for k, v in enumerate(value)])
        else:
            setattr(made, name, int(field))
    return made


# (device type, version) -> the command's C type and Python struct
_COMMANDS = {(dmp_dv.DMP_DV_DEV_CONV, 0): ("dmp_dv_cmdraw_conv_v0", dmp_dv.dmp_dv_cmdraw_conv_v0),
             (dmp_dv.DMP_DV_DEV_CONV, 1): ("dmp_dv_cmdraw_conv_v1", dmp_dv.dmp_dv_cmdraw_conv_v1),
             (dmp_dv.DMP_DV_DEV_FC, 0): ("dmp_dv_cmdraw_fc_v0", dmp_dv.dmp_dv_cmdraw_fc_v0)}


@_int
def dmp_dv_cmdlist_add_raw(rt: Runtime, cmdlist: Any, cmd: Any) -> int:
    if rt.null(cmd):
        return int(dmp_dv.dmp_dv_cmdlist_add_raw(rt.handle(cmdlist), None))
    header: Any = _struct_in(rt, dmp_dv.dmp_dv_cmdraw(), cmd)
    known = _COMMANDS.get((header.device_type, header.version))
    # a command of a kind the driver does not know, or shorter than its type: its header
    # alone, which the driver refuses (ENOTSUP, EINVAL)
    command: Any = SimpleNamespace(header=header)
    if known is not None and header.size >= rt.ffi.sizeof(known[0]):
        # only a command as long as its type is read whole
        command = _struct_in(rt, known[1](), rt.ffi.cast(f"{known[0]} *", cmd))
    return int(dmp_dv.dmp_dv_cmdlist_add_raw(rt.handle(cmdlist), command))


@_int
def dmp_dv_cmdlist_commit(rt: Runtime, cmdlist: Any) -> int:
    return int(dmp_dv.dmp_dv_cmdlist_commit(rt.handle(cmdlist)))


@export(refused=-EINVAL, failed=-EINVAL)
def dmp_dv_cmdlist_exec(rt: Runtime, cmdlist: Any) -> int:
    return int(dmp_dv.dmp_dv_cmdlist_exec(rt.handle(cmdlist)))


@_int
def dmp_dv_cmdlist_wait(rt: Runtime, cmdlist: Any, exec_id: int) -> int:
    return int(dmp_dv.dmp_dv_cmdlist_wait(rt.handle(cmdlist), int(exec_id)))


@export(refused=0, failed=0)
def dmp_dv_cmdlist_get_last_exec_time(rt: Runtime, cmdlist: Any) -> int:
    return int(dmp_dv.dmp_dv_cmdlist_get_last_exec_time(rt.handle(cmdlist)))


def _u16(rt: Runtime, pointer: Any, count: int) -> Any:
    if rt.null(pointer):
        return None
    return np.frombuffer(rt.ffi.buffer(rt.ffi.cast("uint16_t *", pointer), 2 * count),
                         np.uint16).copy()


def _packed(rt: Runtime, fn: Any, dims: tuple[int, ...], weight_count: int, out_count: int,
            quant_map: Any, weights: Any, bias: Any, extra: tuple[Any, ...], packed: Any,
            size: Any) -> int:
    """A packer's call: the C arrays as NumPy arrays of the counts the dimensions give,
    the output buffer as `*size` bytes, the size needed written back."""
    if rt.null(size) or any(d <= 0 or d > 1 << 16 for d in dims):
        return int(fn(*dims, None, None, None, *extra, None, None)[0])
    quantised = not rt.null(quant_map)
    table = _u16(rt, quant_map, 256)
    if rt.null(weights) or rt.null(bias):
        values, biases = None, None
    else:
        values = (np.frombuffer(rt.ffi.buffer(rt.ffi.cast("uint8_t *", weights), weight_count),
                                np.uint8).copy() if quantised
                  else _u16(rt, weights, weight_count))
        biases = _u16(rt, bias, out_count)
    given = int(size[0])
    out = (np.frombuffer(rt.ffi.buffer(packed, given), np.uint8)
           if given > 0 and not rt.null(packed) else None)
    rc, need = fn(*dims, table, values, biases, *extra, out, given)
    size[0] = int(need)
    return int(rc)


def _conv_packer(fn: Any, rt: Runtime, n_channels: int, kx: int, ky: int, n_kernels: int,
                 quant_map: Any, weights: Any, bias: Any, prelu: Any, packed: Any,
                 size: Any) -> int:
    dims = (int(n_channels), int(kx), int(ky), int(n_kernels))
    count = dims[0] * dims[1] * dims[2] * dims[3]
    slopes = (None,) if rt.null(prelu) else (_u16(rt, prelu, max(dims[3], 0)),)
    return _packed(rt, fn, dims, count, dims[3], quant_map, weights, bias, slopes, packed,
                   size)


@_int
def dmp_dv_pack_conv_weights(rt: Runtime, *args: Any) -> int:
    return _conv_packer(dmp_dv.dmp_dv_pack_conv_weights, rt, *args)


@_int
def dmp_dv_pack_dil_weights(rt: Runtime, *args: Any) -> int:
    return _conv_packer(dmp_dv.dmp_dv_pack_dil_weights, rt, *args)


@_int
def dmp_dv_pack_fc_weights(rt: Runtime, c_in: int, h_in: int, w_in: int, c_out: int,
                           h_out: int, w_out: int, quant_map: Any, weights: Any, bias: Any,
                           packed: Any, size: Any) -> int:
    dims = tuple(int(d) for d in (c_in, h_in, w_in, c_out, h_out, w_out))
    inputs, outputs = dims[0] * dims[1] * dims[2], dims[3] * dims[4] * dims[5]
    return _packed(rt, dmp_dv.dmp_dv_pack_fc_weights, dims, inputs * outputs, outputs,
                   quant_map, weights, bias, (), packed, size)
