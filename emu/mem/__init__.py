"""Memory system models: the A55 data-cache hierarchy, the shared DDR and the memory pool."""
