"""Pairwise settings: every value comes from the environment, read here and nowhere else.

With nothing set, Pairwise runs on its embedded defaults: a SQLite file under PAIRWISE_DATA_DIR and
Celery tasks run in-process. With DEBUG off (production), it refuses to start unless SECRET_KEY,
DATABASE_URL and CELERY_BROKER_URL are all given.
"""

import secrets
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
DATA_DIR = Path(env.str("PAIRWISE_DATA_DIR", default=str(BASE_DIR / "var")))
DEBUG = env.bool("DEBUG", default=True)

if not DEBUG:
    missing = [name for name in ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL") if not env.str(name, default="")]
    if missing:
        raise ImproperlyConfigured(
            f"production mode (DEBUG=false) needs {', '.join(missing)} in the environment; "
            "set them, or set DEBUG=true to run on the embedded defaults"
        )


def _embedded_secret_key() -> str:
    """A random key kept in the data folder, so sessions survive restarts without a key in the code."""
    key_file = DATA_DIR / "secret_key"
    if not key_file.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = env.str("SECRET_KEY", default="") or _embedded_secret_key()
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "annotate.review",
    "annotate.quality",
    "annotate.exports",
    "annotate.runs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "annotate.middleware.PagesNeedLoginMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "annotate.urls"
WSGI_APPLICATION = "annotate.wsgi.application"
ASGI_APPLICATION = "annotate.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'pairwise.sqlite3'}"),
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
# A health check costs a round trip on every request; a connection that went bad fails one request
# and is then replaced. Turn it on where the database restarts often.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("DB_CONN_HEALTH_CHECKS", default=False)
# The reviewer hot path prepares its few statements once per connection (annotate/review/queue_sql.py);
# turn this off behind a connection pooler that cannot keep prepared statements (PgBouncer < 1.21).
PAIRWISE_PREPARED_STATEMENTS = env.bool("DB_PREPARED_STATEMENTS", default=True)
if PAIRWISE_PREPARED_STATEMENTS and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # psycopg prepares nothing while the threshold is None (Django's default); a threshold no query
    # reaches means only the statements that ask (prepare=True) are prepared.
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 2**31 - 1
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # WAL lets the reviewer page read while a judgment is being written.
    DATABASES["default"]["OPTIONS"] = {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 20}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(DATA_DIR / "static")))
# Embedded mode serves static files straight from the apps; production serves `collectstatic` output.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
if DEBUG:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "annotate.authentication.PairwiseTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["annotate.renderers.OrjsonRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "annotate.negotiation.JsonOnlyNegotiation",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "annotate.api_errors.one_line_exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Pairwise API",
    "DESCRIPTION": "Blinded pairwise review, agreement and dataset snapshots.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

# Celery: with no broker configured, tasks run in-process (the embedded default).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE = {
    "expire-stale-assignments": {"task": "annotate.review.tasks.expire_stale_assignments", "schedule": 60.0},
    "refresh-queue-priorities": {"task": "annotate.review.tasks.refresh_queue_priorities", "schedule": 300.0},
    "fail-stale-exports": {"task": "annotate.exports.tasks.fail_stale_exports", "schedule": 60.0},
}

# Where exports and run folders are written.
SNAPSHOT_ROOT = Path(env.str("PAIRWISE_SNAPSHOT_ROOT", default=str(DATA_DIR / "snapshots")))
RUN_ROOT = Path(env.str("PAIRWISE_RUN_ROOT", default=str(DATA_DIR / "runs")))

if not DEBUG:
    SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
    CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
    SECURE_CONTENT_TYPE_NOSNIFF = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="WARNING")},
}
