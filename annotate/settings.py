"""Pairwise settings: every value comes from the environment, read here and nowhere else.

Two modes (PAIRWISE_MODE). `embedded`, the default, runs on what it brings: a SQLite file under
PAIRWISE_DATA_DIR, Celery tasks run in-process, a random key kept in the data folder. `production`
refuses to start unless SECRET_KEY (a strong one), DATABASE_URL, CELERY_BROKER_URL and ALLOWED_HOSTS
are given, and turns on HTTPS-only cookies, HSTS and the redirect to HTTPS. DEBUG is separate from both
and off unless set: a forgotten setting never serves Django's debug pages (which show the settings).
"""

import secrets
import sys
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
DATA_DIR = Path(env.str("PAIRWISE_DATA_DIR", default=str(BASE_DIR / "var")))
DEBUG = env.bool("DEBUG", default=False)
MODES = ("embedded", "production")
PAIRWISE_MODE = env.str("PAIRWISE_MODE", default="embedded").strip().lower()
if PAIRWISE_MODE not in MODES:
    raise ImproperlyConfigured(f"PAIRWISE_MODE={PAIRWISE_MODE!r} is not a mode: use embedded or production")
PRODUCTION = PAIRWISE_MODE == "production"


def _secret_key_weakness(key: str) -> str | None:
    """Why a key is too weak to sign sessions in production (Django's own deploy check's rule), or None."""
    if key.startswith("django-insecure"):
        return "starts with django-insecure"
    if len(key) < 50:
        return f"has {len(key)} characters"
    if len(set(key)) < 5:
        return f"has {len(set(key))} distinct characters"
    return None


if PRODUCTION:
    if DEBUG:
        raise ImproperlyConfigured(
            "production mode refuses DEBUG=true: debug pages show the settings to anyone who causes an error; "
            "remove DEBUG from the environment"
        )
    missing = [name for name in ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "ALLOWED_HOSTS")
               if not env.str(name, default="")]
    if missing:
        raise ImproperlyConfigured(
            f"production mode (PAIRWISE_MODE=production) needs {', '.join(missing)} in the environment; "
            "set them, or leave PAIRWISE_MODE unset to run on the embedded defaults"
        )
    if weakness := _secret_key_weakness(env.str("SECRET_KEY")):
        raise ImproperlyConfigured(
            f"SECRET_KEY is too weak for production mode: it {weakness}; use at least 50 random characters, "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
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
# Django's test runner adds `testserver` itself; a deployment never needs it.
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
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
    "annotate.backup",
    "axes",
]

MIDDLEWARE = [
    # /healthz answers first: before the host check and the HTTPS redirect, so a probe inside the
    # container or on the node needs neither a public host name nor TLS.
    "annotate.middleware.HealthzMiddleware",
    # Outside ApiErrorsMiddleware, which makes API errors anew: they carry no-store as well.
    "annotate.middleware.NoStoreMiddleware",
    "annotate.middleware.ApiErrorsMiddleware",
    # Before anything reads a body (the CSRF check reads a page's form), on every path.
    "annotate.middleware.RequestBodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "annotate.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "annotate.middleware.PagesNeedLoginMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
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
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # A database that does not answer fails the request (and /healthz) in seconds instead of holding a
    # worker thread until the operating system gives up on the connection.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", env.int("DB_CONNECT_TIMEOUT", default=5))
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # WAL lets the reviewer page read while a judgment is being written. Transactions take the write lock
    # when they begin (IMMEDIATE), so a writer waits its turn (up to `timeout` seconds): a deferred one that
    # read first and then wrote could not wait and failed at once with "database is locked"
    # (bench/embedded_sqlite.py).
    DATABASES["default"]["OPTIONS"] = {"init_command": "PRAGMA journal_mode=WAL;", "timeout": 20,
                                       "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Login throttling (django-axes; docs/security.md, "Login throttling"): after PAIRWISE_LOGIN_FAILURES wrong
# passwords for one username from one address, that username is refused (429) from that address, the right
# password too, until PAIRWISE_LOGIN_LOCKOUT_MINUTES pass without another try. One address is stopped for
# every username after PAIRWISE_LOGIN_FAILURES_PER_ADDRESS failures in that time, whatever usernames it
# tried. Admins lift a lock on the lockouts page (/accounts/lockouts/) or with `manage.py axes_reset_username`.
AUTHENTICATION_BACKENDS = [
    "annotate.login_throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("PAIRWISE_LOGIN_FAILURES", default=10)
PAIRWISE_LOGIN_FAILURES_PER_ADDRESS = env.int("PAIRWISE_LOGIN_FAILURES_PER_ADDRESS", default=100)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("PAIRWISE_LOGIN_LOCKOUT_MINUTES", default=15))
# The username and the address together: a lock on a username alone, or on an address alone at this limit,
# would let anyone lock anyone out (a known username from anywhere, or a whole office from its address).
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Adds the per-address bound: axes compares one count with one limit (annotate/login_throttle.py says more).
AXES_HANDLER = "annotate.login_throttle.LoginThrottleHandler"
AXES_LOCKOUT_CALLABLE = "annotate.login_throttle.locked_out_response"
AXES_CLIENT_IP_CALLABLE = "annotate.login_throttle.client_address"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(DATA_DIR / "static")))
# Embedded mode serves static files straight from the apps (runserver included, DEBUG or not);
# production serves `collectstatic` output.
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = DEBUG
if not PRODUCTION:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# Request bodies: JSON and forms up to PAIRWISE_MAX_BODY_BYTES; multipart uploads (the items import,
# through the API or the admin's form) up to PAIRWISE_MAX_UPLOAD_BYTES, streamed to disk. Bigger ones get
# 413 before anything is read, on every path (annotate.middleware.RequestBodyLimitMiddleware).
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("PAIRWISE_MAX_BODY_BYTES", default=2 * 1024 * 1024)
PAIRWISE_MAX_UPLOAD_BYTES = env.int("PAIRWISE_MAX_UPLOAD_BYTES", default=256 * 1024 * 1024)

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "annotate.authentication.PairwiseTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["annotate.renderers.OrjsonRenderer"],
    "DEFAULT_PARSER_CLASSES": ["annotate.parsers.JSONParser", "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
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
    # In production the schema is for the people who build on the API, behind a login like the rest.
    "SERVE_PERMISSIONS": ["annotate.permissions.IsAdminOrEngineer" if PRODUCTION
                          else "rest_framework.permissions.AllowAny"],
}

# Celery: with no broker configured, tasks run in-process (the embedded default). Celery still takes a
# producer (never connected) for each in-process call: the in-memory transport, with a host named, rather
# than an amqp connection with none (kombu's "No hostname was supplied" warning).
EMBEDDED_BROKER_URL = "memory://localhost/"
CELERY_TASK_ALWAYS_EAGER = not env.str("CELERY_BROKER_URL", default="")
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or EMBEDDED_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Runs are followed without anyone looking (docs/runs.md): every PAIRWISE_RUN_POLL_S seconds the Slurm runs
# are read and a local run whose worker has not reported for PAIRWISE_RUN_LOST_AFTER_S is marked failed.
# Workers report every 5 s; the limit leaves room for a worker busy with the database or the disk.
PAIRWISE_RUN_POLL_S = env.int("PAIRWISE_RUN_POLL_S", default=30)
PAIRWISE_RUN_LOST_AFTER_S = env.int("PAIRWISE_RUN_LOST_AFTER_S", default=120)
if PAIRWISE_RUN_POLL_S < 1:
    raise ImproperlyConfigured(f"PAIRWISE_RUN_POLL_S={PAIRWISE_RUN_POLL_S} must be 1 or more seconds")
if PAIRWISE_RUN_LOST_AFTER_S < 30:
    raise ImproperlyConfigured(f"PAIRWISE_RUN_LOST_AFTER_S={PAIRWISE_RUN_LOST_AFTER_S} would fail live runs: "
                               "workers report every 5 s; use 30 or more seconds")
CELERY_BEAT_SCHEDULE = {
    "expire-stale-assignments": {"task": "annotate.review.tasks.expire_stale_assignments", "schedule": 60.0},
    "refresh-queue-priorities": {"task": "annotate.quality.tasks.refresh_queue_priorities", "schedule": 300.0},
    "fail-stale-exports": {"task": "annotate.exports.tasks.fail_stale_exports", "schedule": 60.0},
    # A sweep that waited past the next one's turn is dropped: the next does the same work.
    "poll-slurm-runs": {"task": "annotate.runs.tasks.poll_slurm_runs", "schedule": float(PAIRWISE_RUN_POLL_S),
                        "options": {"expires": PAIRWISE_RUN_POLL_S}},
    "mark-lost-runs": {"task": "annotate.runs.tasks.mark_lost_runs", "schedule": float(PAIRWISE_RUN_POLL_S),
                       "options": {"expires": PAIRWISE_RUN_POLL_S}},
}

# Where exports and run folders are written.
SNAPSHOT_ROOT = Path(env.str("PAIRWISE_SNAPSHOT_ROOT", default=str(DATA_DIR / "snapshots")))
RUN_ROOT = Path(env.str("PAIRWISE_RUN_ROOT", default=str(DATA_DIR / "runs")))
# Files the app writes for runs to read: task sets (made or uploaded), prompt files of comparisons.
INPUTS_ROOT = Path(env.str("PAIRWISE_INPUTS_ROOT", default=str(DATA_DIR / "inputs")))
# The longest a task set's check may take in all (every reference solution run in the sandbox, off the request);
# past it the set is refused in one line (docs/runs.md, "Task sets").
PAIRWISE_TASK_SET_CHECK_S = env.int("PAIRWISE_TASK_SET_CHECK_S", default=300)
# Steps of the demo's SFT checkpoint (manage.py build_demo_checkpoint): tiny-sft's own recipe by default.
PAIRWISE_DEMO_SFT_STEPS = env.int("PAIRWISE_DEMO_SFT_STEPS", default=320)
# The only folders whose files a run launched from the app may read (snapshots, task and prompt files,
# path-valued config keys such as deepspeed); comma-separated. Default: the snapshots, the run folders and
# DATA_DIR/inputs.
PAIRWISE_RUN_INPUT_ROOTS = [Path(root) for root in env.list("PAIRWISE_RUN_INPUT_ROOTS", default=[])] or [
    SNAPSHOT_ROOT, RUN_ROOT, INPUTS_ROOT]

# Slurm jobs (backend slurm; docs/deploy.md, "A Slurm cluster"): what every job asks for, unless a run's config
# sets some of it under `slurm:`. Empty text leaves it to the cluster (its default partition, no account, its
# memory and time defaults); 0 GPUs per node writes no GPU option (a CPU partition). Extra options (e.g.
# "--exclusive --qos=high") are the deployment's only. PAIRWISE_SLURM_PYTHON: the interpreter jobs run, by default
# this one (the same path on the nodes' shared storage).
PAIRWISE_SLURM_PARTITION = env.str("PAIRWISE_SLURM_PARTITION", default="")
PAIRWISE_SLURM_ACCOUNT = env.str("PAIRWISE_SLURM_ACCOUNT", default="")
PAIRWISE_SLURM_NODES = env.str("PAIRWISE_SLURM_NODES", default="1")
PAIRWISE_SLURM_GPUS_PER_NODE = env.str("PAIRWISE_SLURM_GPUS_PER_NODE", default="1")
PAIRWISE_SLURM_CPUS_PER_TASK = env.str("PAIRWISE_SLURM_CPUS_PER_TASK", default="8")
PAIRWISE_SLURM_MEM = env.str("PAIRWISE_SLURM_MEM", default="")
PAIRWISE_SLURM_TIME = env.str("PAIRWISE_SLURM_TIME", default="24:00:00")
PAIRWISE_SLURM_EXTRA_OPTIONS = env.str("PAIRWISE_SLURM_EXTRA_OPTIONS", default="")
PAIRWISE_SLURM_PYTHON = env.str("PAIRWISE_SLURM_PYTHON", default="") or sys.executable
try:
    from annotate.runs.slurm_resources import RUN_KEYS, extra_options, resource_value

    for _key in RUN_KEYS:
        _name = f"PAIRWISE_SLURM_{_key.upper()}"
        globals()[_name] = resource_value(_key, globals()[_name], _name)
    extra_options(PAIRWISE_SLURM_EXTRA_OPTIONS, "PAIRWISE_SLURM_EXTRA_OPTIONS")
except ValueError as _error:
    raise ImproperlyConfigured(str(_error)) from None

# Behind a proxy that terminates TLS: trust its X-Forwarded-Proto for "this request came over HTTPS"
# and the address it appends to X-Forwarded-For for the client (login throttling counts by it). Only
# with a proxy that sets both headers itself; otherwise any client could claim either.
PAIRWISE_BEHIND_PROXY = env.bool("PAIRWISE_BEHIND_PROXY", default=False)
if PAIRWISE_BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

if PRODUCTION:
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=365 * 24 * 3600)
    SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
    CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
SECURE_CONTENT_TYPE_NOSNIFF = True
# Pages load scripts, styles and images from this site only, with no inline code (annotate/middleware.py).
PAIRWISE_CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
    "connect-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="WARNING")},
}
