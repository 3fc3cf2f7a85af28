"""The files and folders a run may read: only those under the run input folders (PAIRWISE_RUN_INPUT_ROOTS).
Launches, evaluations, comparisons and task sets all check their paths here."""

from pathlib import Path

from django.conf import settings

from annotate.errors import UserMistake
from annotate.limits import text_within

MAX_PATH_CHARS = 4096


def input_roots() -> list[Path]:
    return [Path(root).expanduser().resolve() for root in settings.PAIRWISE_RUN_INPUT_ROOTS]


def input_path(name: str, value) -> Path:
    """A path a run will read, resolved (links followed), or UserMistake unless it lies in the run input folders
    (PAIRWISE_RUN_INPUT_ROOTS). Checked before anything opens it: a file elsewhere is never read, so nothing of
    it can show in an error."""
    text = str(value if value is not None else "").strip()
    text_within(name, text, MAX_PATH_CHARS)
    path = Path(text).expanduser().resolve()
    roots = input_roots()
    if not any(path.is_relative_to(root) for root in roots):
        raise UserMistake(f"{name} {text} is outside the folders runs read from ({', '.join(map(str, roots))}); move "
                          "it under one of them, or add its folder to PAIRWISE_RUN_INPUT_ROOTS")
    return path
