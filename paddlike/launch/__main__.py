"""python -m paddlike.launch"""

import os
import sys

from paddlike.launch.main import main

code = main()
# Everything the launcher owns (workers, log files, stores) is closed by main() itself;
# skipping the interpreter's teardown saves 10-60 ms between a failure and our exit.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
