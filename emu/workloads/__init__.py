"""What users run on the emulated SoC: scenarios and workloads."""
