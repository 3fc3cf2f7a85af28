#!/bin/bash
# The training step of deploy/slurm/{dpo,reward,grpo}.sbatch, inside their job:
#   deploy/slurm/train.sh KIND CONFIG.yaml ACCELERATE_CONFIG.yaml
# With GPUs (--gpus-per-node N): one accelerate launcher per node, N processes each. Without (a CPU partition):
# the config's `processes` (default 1) on the job's first node, more than one started by accelerate with
# deploy/accelerate/cpu_ddp.yaml as the app's local backend starts them. PYTHON: the interpreter with Pairwise
# installed (default python).
set -euo pipefail
KIND=${1:?usage: train.sh KIND CONFIG.yaml ACCELERATE_CONFIG.yaml}
CONFIG=${2:?usage: train.sh KIND CONFIG.yaml ACCELERATE_CONFIG.yaml}
ACCELERATE_CONFIG=${3:?usage: train.sh KIND CONFIG.yaml ACCELERATE_CONFIG.yaml}
PYTHON=${PYTHON:-python}
GPUS_PER_NODE=${SLURM_GPUS_PER_NODE:-0}
# srun does not pass the job's CPUs on to its tasks (Slurm 22.05 and later): each asks for them itself.
CPUS=${SLURM_CPUS_PER_TASK:-1}
export HF_HUB_OFFLINE=1   # nothing is downloaded at run time: checkpoints are local paths

echo "${SLURM_JOB_NAME:-job} (job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-$(hostname)}, $GPUS_PER_NODE GPUs per node):" \
     "$PYTHON -m training $KIND --config $CONFIG"
if (( GPUS_PER_NODE == 0 )); then
  PROCESSES=1
  # An interpreter missing on the node is left to srun, whose execve() error is the log's last line.
  if command -v "$PYTHON" >/dev/null 2>&1; then
    PROCESSES=$("$PYTHON" -c 'import sys, yaml; print(int((yaml.safe_load(open(sys.argv[1])) or {}).get("processes") or 1))' "$CONFIG")
  fi
  if (( PROCESSES > 1 )); then
    echo "$PROCESSES processes: accelerate launch --config_file deploy/accelerate/cpu_ddp.yaml --num_processes $PROCESSES"
    exec srun --nodes=1 --ntasks=1 --cpus-per-task="$CPUS" --kill-on-bad-exit=1 \
      "$PYTHON" -m accelerate.commands.launch --config_file deploy/accelerate/cpu_ddp.yaml \
      --num_processes "$PROCESSES" -m training "$KIND" --config "$CONFIG"
  fi
  exec srun --nodes=1 --ntasks=1 --cpus-per-task="$CPUS" --kill-on-bad-exit=1 \
    "$PYTHON" -m training "$KIND" --config "$CONFIG"
fi
MAIN_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MAIN_PORT=${MAIN_PORT:-29500}
exec srun --cpus-per-task="$CPUS" --kill-on-bad-exit=1 bash -c "'$PYTHON' -m accelerate.commands.launch \
  --config_file '$ACCELERATE_CONFIG' \
  --num_machines '$SLURM_NNODES' \
  --num_processes $((SLURM_NNODES * GPUS_PER_NODE)) \
  --machine_rank \$SLURM_NODEID \
  --main_process_ip '$MAIN_HOST' \
  --main_process_port '$MAIN_PORT' \
  -m training '$KIND' --config '$CONFIG'"
