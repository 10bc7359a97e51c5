"""A ps-heter job script with two heter stages: trainer -> stage 2 -> stage 3 and back.

Trainer i sends batches b = 0..N-1 of value 100*i + b and expects (x + 1) * 2 back.
Stage 2 adds 1 and relays each batch to stage 3 (batch id 1000*i + b, unique per
sender), which doubles it; stage 2 returns stage 3's answer to the trainer. Stage 2
ends its own stream to stage 3 once every trainer has ended. Each prints a done line.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from paddlike.distributed import ps

BATCHES = 4


def main() -> None:
    if not ps.is_heter_worker():
        tid = int(os.environ["PADDLE_TRAINER_ID"])
        for b in range(BATCHES):
            x = np.full(3, 100 * tid + b, dtype=np.float32)
            ps.send_forward(x, batch_id=b)
            assert np.array_equal(ps.recv_backward(b), (x + 1) * 2), b
        ps.end_forward()
        print(f"trainer {tid}: done", flush=True)
        return
    stage, relayed = ps.stage_id(), 0
    while (batch := ps.recv_forward()) is not None:
        tid, b, x = batch
        if stage == 2:
            ps.send_forward(x + 1, batch_id=1000 * tid + b)
            ps.send_backward(ps.recv_backward(1000 * tid + b), b, trainer_id=tid)
        else:
            ps.send_backward(x * 2, b)
        relayed += 1
    if stage < ps.stage_num():
        ps.end_forward()
    print(f"stage {stage} of {ps.stage_num()}: done, {relayed} batches", flush=True)


if __name__ == "__main__":
    sys.exit(main())
