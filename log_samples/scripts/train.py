"""A stand-in training script: prints its rank, 'trains', fails where asked."""
import os
import sys
import time

rank = int(os.environ["PADDLE_TRAINER_ID"])
world = int(os.environ["PADDLE_TRAINERS_NUM"])
restart = int(os.environ.get("PADDLIKE_RESTART_COUNT", "0"))
fail_rank = int(os.environ.get("SAMPLE_FAIL_RANK", "-1"))
fail_rounds = int(os.environ.get("SAMPLE_FAIL_ROUNDS", "99"))


def load_shard(rank: int) -> None:
    raise RuntimeError(f"rank {rank} cannot read shard data/part-{rank:05d}")


print(f"rank {rank} of {world} on {os.environ['PADDLE_CURRENT_ENDPOINT']} (restart {restart})",
      flush=True)
for step in range(3):
    print(f"rank {rank} step {step} loss {1.0 / (step + 1):.3f}", flush=True)
    time.sleep(0.05)
if rank == fail_rank and restart < fail_rounds:
    try:
        load_shard(rank)
    except RuntimeError:
        import traceback
        traceback.print_exc()
        sys.exit(3)
if rank != fail_rank and fail_rank >= 0 and restart < fail_rounds:
    time.sleep(30)  # the launcher stops this one when the failing rank exits
print(f"rank {rank} done", flush=True)
