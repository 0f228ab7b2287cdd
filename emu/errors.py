"""The error types library code raises; the CLI maps them to exit codes.

Library code never prints or exits. A user mistake (bad configuration, bad input file,
impossible hardware, misuse of the simulation API) raises a subclass of `UserError`, whose
message is one line naming what was wrong and where; the CLI prints it and exits 2.
Anything else that derives from `EmuError` is an emulator-side failure (exit 1).
"""


class EmuError(Exception):
    """Base class of every error the emulator raises on purpose."""


class UserError(EmuError):
    """Something the user supplied is wrong; the message says what and where."""


class ConfigError(UserError):
    """A configuration file, preset or override is unknown, malformed or impossible."""


class InputError(UserError):
    """An input file or argument cannot be used."""


class UsageError(InputError):
    """A command line that does not parse; the message starts with the command's name
    (`emu pointcloud: the following arguments are required: --model`)."""


class SimulationError(EmuError):
    """The simulation was driven in a way its components do not allow."""


class HostThreadError(EmuError):
    """A host thread's function raised; the original exception is the cause."""


class PoolError(UserError):
    """A memory-pool request cannot be met (exhaustion, fragmentation, bad free)."""


class TaskError(EmuError):
    """A task failed. The task records the message and completes as failed; the simulation
    and the other tasks go on."""


class DspError(TaskError):
    """An operator on an emulated DSP failed: a fault, a tile that does not fit, bad arguments.

    It fails the RPC task that ran the operator (the caller sees an error code and this
    message); the emulator and the other tasks go on.
    """
