#!/usr/bin/env bash
# Installs Pairwise and everything it needs into .venv at the repository root. Safe to run again:
# it does nothing when pyproject.toml and constraints.txt have not changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."

python=$(command -v python3.11 || command -v python3)
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=.venv/.pairwise-install
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "Installing Pairwise into .venv ..."
  .venv/bin/python -m pip install -q --upgrade pip
  # torch first, pinned: a plain `torch` requirement would pull a multi-GB CUDA build.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  # Everything: the web app, training and the tests (a web host alone needs only ".[web]": docs/deploy.md).
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[web,train,test]"
  echo "$want" > "$stamp"
fi
