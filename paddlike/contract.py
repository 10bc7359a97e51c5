"""The environment-variable names shared by the launcher and the runtime, and by the
cluster starter and each host's launcher.

The launcher writes these into every worker's environment; `paddlike.distributed`
reads them. Paddle, torchrun and OneFlow scripts read the same names, which is why
a script written for any of them runs unchanged under paddlike. One name lives in
one place: here.
"""

from __future__ import annotations

# --- global rank and sizes (Paddle, torchrun / OneFlow forms) -----------------
TRAINER_ID = "PADDLE_TRAINER_ID"
GLOBAL_RANK = "PADDLE_GLOBAL_RANK"
RANK = "RANK"
TRAINERS_NUM = "PADDLE_TRAINERS_NUM"
GLOBAL_SIZE = "PADDLE_GLOBAL_SIZE"
WORLD_SIZE = "WORLD_SIZE"

RANK_IN_NODE = "PADDLE_RANK_IN_NODE"
PADDLE_LOCAL_RANK = "PADDLE_LOCAL_RANK"
LOCAL_RANK = "LOCAL_RANK"
PADDLE_LOCAL_SIZE = "PADDLE_LOCAL_SIZE"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
NNODES = "PADDLE_NNODES"
# torchrun also sets these two; OneFlow reads NODE_RANK.
GROUP_RANK = "GROUP_RANK"
NODE_RANK = "NODE_RANK"

# torchrun's own additions; libraries (Lightning, torch's env:// init) read them.
GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE"
ROLE_RANK = "ROLE_RANK"
ROLE_NAME = "ROLE_NAME"
ROLE_WORLD_SIZE = "ROLE_WORLD_SIZE"
TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"  # makes torch's is_torchelastic_launched() true
TORCHELASTIC_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
TORCHELASTIC_MAX_RESTARTS = "TORCHELASTIC_MAX_RESTARTS"
# Always "False": no torchrun agent hosts a store here, so rank 0 must host torch's own.
TORCHELASTIC_USE_AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
OMP_NUM_THREADS = "OMP_NUM_THREADS"  # "1" with several workers per node, unless set

# --- endpoints ---------------------------------------------------------------
CURRENT_ENDPOINT = "PADDLE_CURRENT_ENDPOINT"
TRAINER_ENDPOINTS = "PADDLE_TRAINER_ENDPOINTS"
PADDLE_MASTER = "PADDLE_MASTER"
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"

# --- devices -------------------------------------------------------------------
SELECTED_GPUS = "FLAGS_selected_gpus"
LOCAL_DEVICE_IDS = "PADDLE_LOCAL_DEVICE_IDS"
WORLD_DEVICE_IDS = "PADDLE_WORLD_DEVICE_IDS"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
DISTRI_BACKEND = "PADDLE_DISTRI_BACKEND"
GLOO_SOCKET_IFNAME = "GLOO_SOCKET_IFNAME"
NCCL_SOCKET_IFNAME = "NCCL_SOCKET_IFNAME"

# --- parameter-server mode ---------------------------------------------------------
TRAINING_ROLE = "TRAINING_ROLE"
PADDLE_ROLE = "PADDLE_ROLE"
PSERVERS_IP_PORT_LIST = "PADDLE_PSERVERS_IP_PORT_LIST"
PADDLE_PORT = "PADDLE_PORT"
POD_IP = "POD_IP"
ALL_HETER_TRAINER_IP_PORT_LIST = "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"
PREVIOUS_HETER_TRAINER_IP_PORT_LIST = "PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST"
NEXT_HETER_TRAINER_IP_PORT_LIST = "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST"
STAGE_ID = "STAGE_ID"
STAGE_NUM = "STAGE_NUM"
STAGE_TRAINERS_NUM = "PADDLE_STAGE_TRAINERS_NUM"  # per-stage trainer counts, a Python list
HETER_DEVICE_TYPE = "HETER_DEVICE_TYPE"

# Paddle's fleet starts its gloo (barrier_worker, util.all_reduce) only when these are set;
# server 0's node hosts the gloo HTTP rendezvous at PADDLE_GLOO_HTTP_ENDPOINT.
PADDLE_WITH_GLOO = "PADDLE_WITH_GLOO"
PADDLE_GLOO_RENDEZVOUS = "PADDLE_GLOO_RENDEZVOUS"
PADDLE_GLOO_HTTP_ENDPOINT = "PADDLE_GLOO_HTTP_ENDPOINT"

# Paddle's launcher sets these two; Paddle's auto-checkpoint and fleet_util read them.
PADDLE_LOG_DIR = "PADDLE_LOG_DIR"
PADDLE_JOB_ID = "PADDLE_JOB_ID"

ROLE_TRAINER = "TRAINER"
ROLE_PSERVER = "PSERVER"
ROLE_HETER_TRAINER = "HETER_TRAINER"

# --- the launcher's own additions ------------------------------------------------------
JOB_ID = "PADDLIKE_JOB_ID"
RESTART_COUNT = "PADDLIKE_RESTART_COUNT"
JOB_TOKEN = "PADDLIKE_JOB_TOKEN"  # shared secret for the stores' HMAC challenge
NODE_HOSTS = "PADDLIKE_NODE_HOSTS"  # comma-separated node addresses, rank 0's store allow-list
TIMEOUT = "PADDLIKE_TIMEOUT"  # seconds; default deadline for the runtime's blocking waits
# In-process restarts (`paddlike.distributed.restartable`, the launcher's `run.warm`): the
# job's private 0700 directory of unix sockets (<pid>.sock: a process that may be kept;
# launcher.sock: "parked"), how long a parked process waits for the next round (seconds),
# and the park signal, SIGRTMIN + this offset (SIGRTMIN+4 takes stacks)
WARM_DIR = "PADDLIKE_WARM_DIR"
WARM_WAIT = "PADDLIKE_WARM_WAIT"
WARM_PARK_SIGNAL_OFFSET = 5

# Prefix of the launcher's option variables: --log_dir <-> PADDLIKE_LOG_DIR, etc.
# Workers are never given an option variable that would change a launcher started
# inside them (its log directory, its mode): the log directory reaches workers as
# PADDLE_LOG_DIR, the mode as TRAINING_ROLE. PADDLIKE_JOB_ID and PADDLIKE_JOB_TOKEN are
# the exceptions, on purpose: a nested job keeps the job's name and secret.
OPTION_ENV_PREFIX = "PADDLIKE_"

# --- the cluster starter and each host's launcher (set in each host's script) ------------
# "1": this launcher was started by the one-command cluster start (`cluster.remote`); it
# ends its job when its stdin closes and takes "signal N" lines there (`cluster.eofwatch`)
STDIN_EOF_ENDS = "PADDLIKE_STDIN_EOF_ENDS"
# "1": describe the job (the check), say READY, wait for GO on stdin (`cluster.hold`)
HELD_AT_GATE = "PADDLIKE_HELD_AT_GATE"
# "1": only the pre-flight check, exit 0 (healthy) or 69, no worker (`health.choose`);
# and the one-command start's line on which of its hosts run (`cluster.spares`)
PREFLIGHT_ONLY = "PADDLIKE_PREFLIGHT_ONLY"
PREFLIGHT_CHOSEN = "PADDLIKE_PREFLIGHT_CHOSEN"
# --job_token_file's variable: unset on each host (the job's token travels instead)
JOB_TOKEN_FILE = OPTION_ENV_PREFIX + "JOB_TOKEN_FILE"
# what the user gave on the starting machine for the --gpus the cluster starter writes in a
# host's command ("--hostfile hf --include a:0@b"): that host's refusals of --gpus name it
GPUS_GIVEN_AS = OPTION_ENV_PREFIX + "GPUS_GIVEN_AS"

# torchelastic's error file (torchrun sets it; the launcher too, next to each worker's log).
# paddlike's runtime writes it for an uncaught exception, adding {"paddlike": {PEER_EXITED:
# R}} when the exception reports peer rank R's exit: a consequence, not the job's cause.
ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
PEER_EXITED = "peer_exited"
