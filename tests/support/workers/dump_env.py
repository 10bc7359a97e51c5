"""Write this process's environment as JSON to OUTDIR/env.<PADDLE_TRAINER_ID>.json, exit 0."""

import json
import os
import sys

out = sys.argv[1]
rank = os.environ.get("PADDLE_TRAINER_ID", "x")
tmp = os.path.join(out, f".env.{rank}.tmp")
with open(tmp, "w") as f:
    json.dump(dict(os.environ), f)
os.replace(tmp, os.path.join(out, f"env.{rank}.json"))
print(f"rank {rank} dumped its environment")
