"""Tests of emu.sweep: specs, the store, running sweeps."""
