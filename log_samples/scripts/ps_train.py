"""A stand-in PS script: servers serve until the launcher stops them, trainers finish."""
import os
import signal
import sys
import time

role = os.environ["TRAINING_ROLE"]
if role == "PSERVER":
    print(f"server on port {os.environ['PADDLE_PORT']} of "
          f"{os.environ['PADDLE_PSERVERS_IP_PORT_LIST']}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)
else:
    tid = os.environ["PADDLE_TRAINER_ID"]
    print(f"trainer {tid} of {os.environ['PADDLE_TRAINERS_NUM']}, servers "
          f"{os.environ['PADDLE_PSERVERS_IP_PORT_LIST']}", flush=True)
    for step in range(3):
        print(f"trainer {tid} step {step}", flush=True)
        time.sleep(0.05)
