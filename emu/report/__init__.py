"""Reports of a run: JSON documents, human-readable tables and Perfetto traces."""
