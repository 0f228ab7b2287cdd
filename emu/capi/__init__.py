"""libemu_rt: emu's runtime APIs for C and C++ programs.

`c/include/` holds the board's headers (hb_sys.h, hb_dnn.h, ...) as emu provides them;
`build.py` builds the shared library with cffi's embedding mode (the Python runtime hosted
inside a C library) and the system C compiler, once per source digest; `calls.py` is what
each exported function does; `bridge.py` runs the program's threads as host threads in
simulated time; `program.py` reads the hardware from the environment and writes the report
and trace at exit; `shim.c` is the C that must run below Python (pthread and clock hooks).
"""
