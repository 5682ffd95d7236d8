#!/usr/bin/env python3
"""check_readme.py README EXAMPLE — fails unless README.md holds EXAMPLE verbatim in a ```cpp block."""
import sys

readme, example = open(sys.argv[1]).read(), open(sys.argv[2]).read()
if "```cpp\n" + example + "```" not in readme:
    sys.exit(f"README.md does not show {sys.argv[2]} unchanged in a ```cpp block; paste it again")
print("ok: README shows the example verbatim")
