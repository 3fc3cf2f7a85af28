"""Settings come from the environment; production refuses to start on embedded defaults."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def manage(*args, env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in {"DATABASE_URL", "SECRET_KEY", "CELERY_BROKER_URL", "DEBUG"}}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


def test_production_mode_refuses_to_start_without_its_settings(tmp_path):
    result = manage("check", env={"DEBUG": "false", "PAIRWISE_DATA_DIR": str(tmp_path)})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "pairwise: production mode (DEBUG=false) needs SECRET_KEY, DATABASE_URL, CELERY_BROKER_URL in the "
        "environment; set them, or set DEBUG=true to run on the embedded defaults"
    )
    assert not (tmp_path / "secret_key").exists()


def test_production_mode_starts_with_its_settings(tmp_path):
    result = manage("check", "--deploy", "--fail-level", "ERROR", env={
        "DEBUG": "false", "SECRET_KEY": "x" * 60, "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3",
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0", "PAIRWISE_DATA_DIR": str(tmp_path),
    })
    assert result.returncode == 0, result.stderr


def test_embedded_defaults_use_sqlite_and_a_generated_key_kept_in_the_data_folder(tmp_path):
    code = "from django.conf import settings as s; print(s.DATABASES['default']['ENGINE'], s.CELERY_TASK_ALWAYS_EAGER)"
    result = manage("shell", "-c", code, env={"PAIRWISE_DATA_DIR": str(tmp_path)})
    assert result.stdout.splitlines()[-1].split() == ["django.db.backends.sqlite3", "True"]
    key = (tmp_path / "secret_key").read_text()
    assert len(key) > 40 and oct((tmp_path / "secret_key").stat().st_mode)[-3:] == "600"
    manage("shell", "-c", code, env={"PAIRWISE_DATA_DIR": str(tmp_path)})
    assert (tmp_path / "secret_key").read_text() == key  # the same key after a restart
