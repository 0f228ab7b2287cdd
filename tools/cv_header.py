"""Write c/include/hb_dsp_cv.h, the CV library's C header, from the operator table
(emu/capi/cv_header.py). Run it after changing an operator; a test checks the header."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emu.capi import cv_header

if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / cv_header.PATH
    target.write_text(cv_header.text())
    print(f"wrote {target}")
