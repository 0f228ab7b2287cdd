"""`python -m emu` is the same program as the `emu` console script."""

from emu.cli.main import entry

entry()
