"""vDSP cores: the RPC queue in front of the cores and their iDMA engines."""
