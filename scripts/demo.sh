#!/usr/bin/env bash
# Installs Pairwise, loads the demo projects, task sets, accounts and the demo checkpoint tiny-sft (shipped with
# Pairwise, checked against its manifest), and serves the app on the embedded
# defaults (a SQLite file under ./var, tasks run in-process, no debug pages; static files come from
# the app through whitenoise). Prints the demo passwords.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
.venv/bin/python manage.py migrate --no-input -v 0
.venv/bin/python manage.py seed_demo
address=${PAIRWISE_ADDRESS:-127.0.0.1:8000}
echo "Pairwise is at http://$address/ (log in with an account above; admin pages at /admin/)"
.venv/bin/python manage.py runserver --noreload "$address"
