"""BPU cores: task queues in front of the cores and the per-layer cost model."""
