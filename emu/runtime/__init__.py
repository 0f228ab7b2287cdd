"""The board's runtime APIs under their C names, and the host timeline they advance."""
