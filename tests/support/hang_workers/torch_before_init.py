"""A torch gloo script whose rank 1 never reaches init_process_group (its configuration
never comes), so rank 0 waits in init's rendezvous. Each rank writes $1/ready.<rank>
just before it blocks."""

import os
import sys
import time

import torch.distributed as dist


def load_config(ready: str) -> None:
    open(ready, "w").close()
    time.sleep(600)  # the configuration never comes


def main() -> None:
    ready = os.path.join(sys.argv[1], f"ready.{os.environ['RANK']}")
    if os.environ["RANK"] == "1":
        load_config(ready)
    open(ready, "w").close()
    dist.init_process_group("gloo")


if __name__ == "__main__":
    main()
