"""emu: a cycle-approximate emulator of a J5-class automotive AI SoC.

Importing the package is cheap: sub-packages are imported where they are used, so that
`emu --help` does not pay for numpy, numba or simpy.
"""

__version__ = "0.1.0"
