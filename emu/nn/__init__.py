"""Quantised neural-network graphs as the BPU runs them: the exact integer kernels (`kernels`)."""
