"""The A55 cluster: CPU work items timed from op counts and the cache model."""
