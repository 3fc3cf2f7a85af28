#!/usr/bin/env bash
# Installs the sharded-training environment into .venv-deepspeed at the repository root: the training environment
# (.venv, which scripts/install.sh makes first) with DeepSpeed on top. DeepSpeed stays out of .venv because
# accelerate and transformers change their imports when it is installed, and a run on one process or plain DDP should
# be the run users make without it; on a GPU cluster it is the `gpu` extra of the training image (docs/deploy.md).
# .venv-deepspeed reads .venv's packages through a .pth file and holds only DeepSpeed and what DeepSpeed adds, so it
# costs seconds and no second copy of torch. Safe to run again: it does nothing when this script and .venv's install
# have not changed since the last time.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x .venv/bin/python ] || { echo "scripts/install_deepspeed.sh: .venv is missing; run scripts/install.sh first" >&2; exit 1; }
stamp=.venv-deepspeed/.pairwise-deepspeed-install
want=$(cat scripts/install_deepspeed.sh .venv/.pairwise-install | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "Installing DeepSpeed into .venv-deepspeed ..."
  rm -rf .venv-deepspeed
  training_packages=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  .venv/bin/python -m venv --without-pip .venv-deepspeed
  own_packages=$(.venv-deepspeed/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  # addsitedir (not a bare path) so that .venv's own .pth files, Pairwise's editable install among them, apply too.
  echo "import site; site.addsitedir('$training_packages')" > "$own_packages/pairwise_training_env.pth"
  # pip comes from .venv through that line; it sees .venv's torch as installed and adds only what DeepSpeed needs.
  .venv-deepspeed/bin/python -m pip install -q -c constraints.txt "deepspeed==0.19.8"
  echo "$want" > "$stamp"
fi
