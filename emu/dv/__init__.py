"""DMP DV700 CNN accelerator: data layouts, weight packing, exact execution and timing."""
