#!/usr/bin/env bash
# Installs Pairwise, loads the demo projects, task sets and accounts, builds the demo checkpoint in the
# background, and serves the app on the embedded
# defaults (a SQLite file under ./var, tasks run in-process, no debug pages; static files come from
# the app through whitenoise). Prints the demo passwords.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
.venv/bin/python manage.py migrate --no-input -v 0
.venv/bin/python manage.py seed_demo
# The demo's SFT checkpoint cannot ship (no model hub, no weights in the repository): it is trained from scratch
# in the background while the server runs, and the runs page shows its progress. Its log goes beside the runs.
data_dir=${PAIRWISE_DATA_DIR:-var}
mkdir -p "$data_dir"
.venv/bin/python manage.py build_demo_checkpoint > "$data_dir/demo-checkpoint.log" 2>&1 &
builder=$!
trap 'kill "$builder" 2>/dev/null || true' EXIT INT TERM
address=${PAIRWISE_ADDRESS:-127.0.0.1:8000}
echo "Pairwise is at http://$address/ (log in with an account above; admin pages at /admin/)"
echo "The demo checkpoint tiny-sft is being built in the background (a few minutes; progress on Training runs)."
.venv/bin/python manage.py runserver --noreload "$address"
