"""python -m paddlike.launch"""

import os
import sys

from paddlike.launch.main import main

code = main()
# Everything the launcher owns (workers, log files, stores) is closed by main() itself;
# skipping the interpreter's teardown saves 10-60 ms between a failure and our exit.
# stdout is not flushed here: everything printed there was flushed when printed, and the
# --tee writer thread may be stuck on a console that stopped reading (holding its lock).
sys.stderr.flush()
os._exit(code)
