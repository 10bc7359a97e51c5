"""Write this process's environment as JSON to OUTDIR/env.<PADDLE_TRAINER_ID>.json, exit 0.
DeepSpeed's --local_rank=N (a hostfile start gives it first) is taken as its scripts take it."""

import json
import os
import sys

out = next(a for a in sys.argv[1:] if not a.startswith("--local_rank="))
rank = os.environ.get("PADDLE_TRAINER_ID", "x")
tmp = os.path.join(out, f".env.{rank}.tmp")
with open(tmp, "w") as f:
    json.dump(dict(os.environ), f)
os.replace(tmp, os.path.join(out, f"env.{rank}.json"))
print(f"rank {rank} dumped its environment")
