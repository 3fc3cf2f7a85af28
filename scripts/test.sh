#!/usr/bin/env bash
# Installs everything (Python packages, Debian's Chromium for the browser tests) and runs ruff and the
# whole test suite. Uses PostgreSQL and Redis on 127.0.0.1 when they answer; otherwise SQLite, and the
# tests that need Postgres row locks are skipped and listed as skipped. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
# The generation environment (.venv-vllm) that tests/training/test_vllm_generation.py samples with, and the
# sharded-training one (.venv-deepspeed) that tests/training/test_deepspeed_zero.py trains in.
scripts/install_vllm.sh
scripts/install_deepspeed.sh

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "Installing Debian's chromium and chromium-driver for the browser tests ..."
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "note: /usr/bin/chromium is missing; the browser tests will be skipped (sudo apt-get install chromium chromium-driver)"
  fi
fi

if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/pairwise}
elif [ -n "${PAIRWISE_REQUIRE_SERVICES:-}" ]; then
  echo "PostgreSQL is not answering on 127.0.0.1:5432, and this run requires it" >&2; exit 1
else
  echo "note: PostgreSQL is not answering on 127.0.0.1:5432; running on SQLite"
fi
if redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
  export PAIRWISE_TEST_REDIS_URL=${PAIRWISE_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}
elif [ -n "${PAIRWISE_REQUIRE_SERVICES:-}" ]; then
  echo "Redis is not answering on 127.0.0.1:6379, and this run requires it" >&2; exit 1
fi

data_dir=$(mktemp -d)
trap 'rm -rf "$data_dir"' EXIT
export PAIRWISE_DATA_DIR=$data_dir
# Tests start servers in threads (browser tests, concurrency tests); closed connections let the test database go.
export DB_CONN_MAX_AGE=0

.venv/bin/ruff check .
# Two pytest-xdist workers by default (one file stays on one worker, so module fixtures are built once), given
# the files slowest first (tests/conftest.py, from tests/file_durations.json);
# PAIRWISE_TEST_WORKERS=1 runs the suite in one process. `scripts/test.sh --quick` leaves out the slow and
# browser tests (tests/conftest.py) for a run of a few minutes while developing.
workers=${PAIRWISE_TEST_WORKERS:-2}
parallel=()
[ "$workers" -gt 1 ] && parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
.venv/bin/python -m pytest "${parallel[@]}" "$@"
