"""Write emu/runtime/_cv_calls.pyi, the declarations of the hbDSP CV calls and structs
that emu.runtime.hbdsp_cv makes from the operator table at run time (for IDEs and type
checkers). tests/vdsp/test_cv_framework.py fails when the file is out of date.

    python tools/cv_stubs.py
"""

from pathlib import Path

from emu.runtime import hbdsp_cv

if __name__ == "__main__":
    target = Path(hbdsp_cv.__file__).with_name(hbdsp_cv.STUB)
    target.write_text(hbdsp_cv.declarations())
    print(f"wrote {target}")
