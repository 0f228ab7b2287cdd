"""The board's runtime APIs under their C names (`hbsys`, `hbdsp`, `remoteproc`), and the
sessions and host threads they run in (`session`, `host`)."""
