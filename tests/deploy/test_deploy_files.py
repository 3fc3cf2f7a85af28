"""deploy/: the compose file parses and everything it names exists; the Dockerfile copies what exists and
runs unprivileged; .env.example names only what the app reads, and every setting docs/settings.md lists.

No container engine runs here (nor in CI): these checks read the files, they start nothing.
"""

import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
DOCKERFILE = (DEPLOY / "Dockerfile").read_text()
# A repository path inside a command: a folder name, then a file name with an extension.
REPO_PATH = re.compile(r"^[\w.-]+(/[\w.-]+)*\.(py|ya?ml|conf|sh|toml|txt|json)$")


def command_words(service: dict) -> list[str]:
    command = service.get("command", [])
    return shlex.split(command) if isinstance(command, str) else list(command)


def copy_sources() -> list[str]:
    sources = []
    for line in DOCKERFILE.splitlines():
        if line.startswith("COPY "):
            words = [word for word in shlex.split(line)[1:] if not word.startswith("--")]
            sources += words[:-1]
    return sources


def env_names(text: str) -> set[str]:
    """NAME=... lines, active or commented out (a commented line documents a default)."""
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))


def test_the_compose_file_has_every_part_of_a_deployment():
    assert {"postgres", "redis", "migrate", "web", "worker", "beat", "training-worker"} <= set(SERVICES)
    assert "gunicorn" in command_words(SERVICES["web"])
    training = command_words(SERVICES["training-worker"])
    assert training[training.index("--queues") + 1] == "training"
    assert SERVICES["training-worker"]["build"]["args"]["EXTRAS"] == "web,train"
    assert SERVICES["web"]["build"]["args"]["EXTRAS"] == "web"  # no torch on the web host


@pytest.mark.parametrize("name", sorted(SERVICES), ids=lambda name: f"service-{name}")
def test_every_file_a_service_names_exists(name):
    service = SERVICES[name]
    if "build" in service:
        context = (DEPLOY / service["build"]["context"]).resolve()
        assert context == ROOT
        assert (context / service["build"]["dockerfile"]).is_file()
    if "env_file" in service:  # deploy/.env is the operator's copy of deploy/.env.example
        assert (DEPLOY / f"{service['env_file']}.example").is_file()
    for volume in service.get("volumes", []):
        source = volume.split(":")[0]
        if source.startswith((".", "/")):
            assert (DEPLOY / source).exists(), volume
        else:
            assert source in COMPOSE["volumes"], f"{name}: volume {source} is not declared"
    if "build" not in service:
        return
    copied = copy_sources()
    for word in command_words(service):
        if REPO_PATH.match(word):
            assert (ROOT / word).is_file(), f"{name}: {word} is not in the repository"
            assert any(word == source or word.startswith(source.rstrip("/") + "/") for source in copied), \
                f"{name}: {word} is not copied into the image"
        if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+:[a-z_]+", word):  # module:attribute, as gunicorn takes it
            module, attribute = word.split(":")
            source = ROOT / (module.replace(".", "/") + ".py")
            assert re.search(rf"^{attribute}\b", source.read_text(), flags=re.MULTILINE), word
    if "celery" in command_words(service):
        app = command_words(service)[command_words(service).index("-A") + 1]
        assert (ROOT / app / "celery.py").is_file()


def test_the_dockerfile_copies_what_exists_and_runs_unprivileged():
    for source in copy_sources():
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    users = re.findall(r"^USER\s+(\S+)", DOCKERFILE, flags=re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    assert DOCKERFILE.index(f"USER {users[-1]}") < DOCKERFILE.index("CMD")


def settings_read() -> set[str]:
    text = (ROOT / "annotate/settings.py").read_text()
    names = set(re.findall(r"env(?:\.\w+)?\(\s*\"([A-Z][A-Z0-9_]*)\"", text))
    names |= set(re.findall(r"os\.environ\.get\(\"([A-Z][A-Z0-9_]*)\"", (DEPLOY / "gunicorn.conf.py").read_text()))
    return names


def test_env_example_names_only_what_is_read_and_every_setting_the_settings_page_lists():
    example = (DEPLOY / ".env.example").read_text()
    named = env_names(example)
    # The compose file reads POSTGRES_PASSWORD itself, for the database container.
    compose_reads = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (DEPLOY / "compose.yaml").read_text()))
    assert named - settings_read() - compose_reads == set()
    table = (ROOT / "docs" / "settings.md").read_text()
    first_cells = [row.split("|")[1] for row in table.splitlines() if row.startswith("| `")]
    listed = {name for cell in first_cells for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cell)}
    assert len(listed) > 20
    assert listed - named == set()
    assert listed - settings_read() == set()  # and the page lists nothing the app does not read


def test_env_example_holds_no_usable_secret():
    example = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", (DEPLOY / ".env.example").read_text(), flags=re.MULTILINE))
    assert "CHANGE-ME" in example["SECRET_KEY"]
    password = example["POSTGRES_PASSWORD"]
    assert "CHANGE-ME" in password and f":{password}@" in example["DATABASE_URL"]


def test_the_slurm_templates_are_kept():
    assert {path.name for path in (DEPLOY / "slurm").glob("*.sbatch")} >= {"dpo.sbatch", "grpo.sbatch", "reward.sbatch"}
