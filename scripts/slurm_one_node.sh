#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the tests and for trying the Slurm backend:
#   scripts/slurm_one_node.sh start|stop|status
# start: a generated munge key and slurm.conf under PAIRWISE_SLURM_CLUSTER_DIR (default /tmp/pairwise-slurm),
# then munged, slurmctld and slurmd on them (no systemd, nothing in /etc), each waited for at most
# PAIRWISE_SLURM_WAIT_S seconds (default 30); it prints the line to export for sbatch, squeue, sacct, ...:
#   export SLURM_CONF=/tmp/pairwise-slurm/slurm.conf
# One partition, "cpu" (the default), holds the node with all its CPUs and memory, no GPUs. Accounting is the
# job completion file (sacct --completion reads it; there is no slurmdbd). Memory limits (--mem) are enforced
# by polling the job's processes every second (JobAcctGatherParams=OverMemoryKill).
# stop: cancels every job of this cluster, then stops the three daemons. status: one line, exit 0 when all
# three answer. Each failure is one line naming the daemon that did not answer, and its log.
# Installs nothing: the Debian packages slurm-wlm and munge (scripts/install_slurm.sh). Runs as root.
set -euo pipefail

DIR=${PAIRWISE_SLURM_CLUSTER_DIR:-/tmp/pairwise-slurm}
WAIT_S=${PAIRWISE_SLURM_WAIT_S:-30}
CTLD_PORT=${PAIRWISE_SLURM_PORT:-6817}   # slurmd listens on the next port
CONF=$DIR/slurm.conf
SOCKET=$DIR/munge/munge.socket
export SLURM_CONF=$CONF

fail() { echo "slurm_one_node.sh: $*" >&2; exit 1; }

# wait_for WHAT LOG COMMAND...: run COMMAND every half second until it succeeds, at most WAIT_S seconds.
wait_for() {
  local what=$1 log=$2 deadline=$((SECONDS + WAIT_S))
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what did not answer within ${WAIT_S} s (its log: $log)"
    sleep 0.5
  done
}

munge_answers() { munge -n -S "$SOCKET" | unmunge -S "$SOCKET"; }
slurmctld_answers() { scontrol ping | grep -q "is UP"; }
slurmd_answers() { [[ $(sinfo -h -N -o %t 2>/dev/null) =~ ^(idle|mix|alloc|comp) ]]; }

pid_of() {  # the pid in a pid file, if that process is alive
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

write_conf() {
  local host cpus memory_mb
  host=$(hostname -s)
  cpus=$(getconf _NPROCESSORS_ONLN)  # not nproc: it answers OMP_NUM_THREADS, which a test process may set to 1
  # What jobs may ask for: the machine's memory less 512 MB for the system and the daemons.
  memory_mb=$(( $(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo) - 512 ))
  cat > "$CONF" <<EOF
# Written by scripts/slurm_one_node.sh: a one-node cluster on $host.
ClusterName=pairwise
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
PlugStackConfig=$DIR/plugstack.conf
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((memory_mb / cpus))
SchedulerType=sched/backfill
# Jobs start within a second of their submission or of the job they wait for.
SchedulerParameters=sched_min_interval=100000
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  : > "$DIR/plugstack.conf"
}

start() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
    || fail "slurmctld, slurmd or munged is not installed (scripts/install_slurm.sh installs them)"
  if (status) >/dev/null 2>&1; then
    echo "export SLURM_CONF=$CONF"
    return
  fi
  stop >/dev/null 2>&1 || true
  mkdir -p "$DIR"/{munge,state,spool,run,log}
  chmod 700 "$DIR/munge"
  if [[ ! -s $DIR/munge/munge.key ]]; then
    mungekey --create --keyfile="$DIR/munge/munge.key" >/dev/null
    chmod 400 "$DIR/munge/munge.key"
  fi
  write_conf
  # --force: the folder's parents (/tmp) are writable by all, which munged otherwise refuses.
  munged --force --socket="$SOCKET" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/run/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
    || fail "munged did not start (its log: $DIR/log/munged.log)"
  wait_for munged "$DIR/log/munged.log" munge_answers
  # -c: a fresh controller (no jobs or node states from an earlier start of this folder).
  slurmctld -c -f "$CONF" || fail "slurmctld did not start (its log: $DIR/log/slurmctld.log)"
  wait_for slurmctld "$DIR/log/slurmctld.log" slurmctld_answers
  slurmd -f "$CONF" || fail "slurmd did not start (its log: $DIR/log/slurmd.log)"
  wait_for slurmd "$DIR/log/slurmd.log" slurmd_answers
  echo "export SLURM_CONF=$CONF"
}

stop_daemon() {  # stop_daemon NAME: SIGTERM, then SIGKILL after WAIT_S seconds
  local pid deadline=$((SECONDS + WAIT_S))
  pid=$(pid_of "$DIR/run/$1.pid") || return 0
  kill "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      kill -9 "$pid" 2>/dev/null || true
      echo "slurm_one_node.sh: $1 did not stop within ${WAIT_S} s; killed" >&2
      return 0
    fi
    sleep 0.2
  done
}

stop() {
  if [[ -f $CONF ]] && pid_of "$DIR/run/slurmctld.pid" >/dev/null; then
    # The jobs first, while slurmd can still end their processes.
    scancel --user="$(id -un)" 2>/dev/null || true
    local deadline=$((SECONDS + WAIT_S))
    while [[ -n $(squeue -h -o %i 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.5; done
  fi
  stop_daemon slurmd
  stop_daemon slurmctld
  stop_daemon munged
}

status() {
  [[ -f $CONF ]] || fail "no cluster in $DIR (no slurm.conf); start it with: $0 start"
  pid_of "$DIR/run/munged.pid" >/dev/null && munge_answers >/dev/null 2>&1 \
    || fail "munged is not answering on $SOCKET (its log: $DIR/log/munged.log)"
  slurmctld_answers 2>/dev/null || fail "slurmctld is not answering (its log: $DIR/log/slurmctld.log)"
  slurmd_answers || fail "slurmd is not answering: the node is $(sinfo -h -N -o %t 2>/dev/null || echo unknown) " \
    "(its log: $DIR/log/slurmd.log)"
  echo "one-node Slurm cluster up: munged, slurmctld and slurmd answer; export SLURM_CONF=$CONF"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status   (folder: PAIRWISE_SLURM_CLUSTER_DIR, default /tmp/pairwise-slurm)" >&2
     exit 2 ;;
esac
