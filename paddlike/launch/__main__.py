"""python -m paddlike.launch"""

from paddlike.launch.main import main

raise SystemExit(main())
