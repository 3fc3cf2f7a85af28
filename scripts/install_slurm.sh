#!/usr/bin/env bash
# Installs Slurm and munge from Debian's packages (slurm-wlm 22.05 on bookworm) when they are missing, for the
# one-node cluster of the tests (scripts/slurm_one_node.sh). Needs root and apt; about 10 s and 10 MB on a
# machine that has neither. Safe to run again: it does nothing when slurmctld, slurmd, sbatch and munged exist.
set -euo pipefail

have_all() { command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged; } >/dev/null
have_all && exit 0
[[ $(id -u) == 0 ]] || { echo "install_slurm.sh: installing slurm-wlm and munge needs root" >&2; exit 1; }
command -v apt-get >/dev/null || { echo "install_slurm.sh: no apt-get; install Slurm and munge yourself" >&2; exit 1; }
echo "Installing slurm-wlm and munge ..."
export DEBIAN_FRONTEND=noninteractive
# A fresh machine may have no package lists yet: read them once, then try again.
apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }
have_all || { echo "install_slurm.sh: slurm-wlm and munge installed, but slurmctld, slurmd, sbatch or munged is missing" >&2; exit 1; }
