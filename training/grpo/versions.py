"""Policy versions of a staged GRPO run (docs/training.md, "The staged cycle"): versions/v0000/, v0001/, ...

A version folder is a Hugging Face checkpoint that AutoModelForCausalLM and vLLM load as it is (config,
weights, tokenizer), plus, from v0001 on, the trainer's state that the next update resumes from (optimizer,
scheduler, RNG, trainer_state.json), plus version.json: its number, the content hash of its weights, the
version it was trained from and the batch of answer records that trained it. v0000 is the base checkpoint.

A version is written whole into a hidden folder and renamed into place, so a version folder either holds all
of this or does not exist; an update whose version already exists refuses to run again.
"""

import json
import re
import shutil
from pathlib import Path

from training.atomic_write import atomic_folder, discard_partial
from training.errors import PairwiseInputError

VERSION_FORMAT = "pairwise.policy_version/1"
VERSION_NAME = re.compile(r"^v(\d{4,})$")
# What a base checkpoint's folder holds that a version needs (the weights and what reads them).
_CHECKPOINT_FILES = ("*.json", "*.safetensors", "*.bin", "*.model", "*.txt", "*.jinja", "*.py")


def version_name(number: int) -> str:
    return f"v{number:04d}"


def version_number(name: str) -> int:
    match = VERSION_NAME.match(name)
    if match is None:
        raise PairwiseInputError(f"{name!r} is not a policy version name; versions are v0000, v0001, ...")
    return int(match.group(1))


def versions_folder(run: Path) -> Path:
    return Path(run) / "versions"


def version_path(run: Path, number: int) -> Path:
    return versions_folder(run) / version_name(number)


def read_version(run: Path, number: int) -> dict:
    """version.json of version `number`; one line if that version was never written."""
    path = version_path(run, number) / "version.json"
    if not path.is_file():
        raise PairwiseInputError(f"{run}: policy version {version_name(number)} does not exist (no {path}); run the "
                                 "update that makes it first")
    return json.loads(path.read_text(encoding="utf-8"))


def latest_version(run: Path) -> int | None:
    """The highest version number with a complete folder, or None."""
    folder = versions_folder(run)
    numbers = [version_number(p.name) for p in folder.iterdir()
               if p.is_dir() and VERSION_NAME.match(p.name) and (p / "version.json").is_file()] if folder.is_dir() else []
    return max(numbers) if numbers else None


def write_version(run: Path, number: int, fill, *, parent: int | None, trained_on: dict | None) -> dict:
    """Write version `number`: `fill(folder)` puts the checkpoint files into a hidden folder, then version.json
    is added and the folder renamed into place. Refuses if the version exists (an update runs once)."""
    from training.run_folder import checkpoint_content_hash, utc_now

    target = version_path(run, number)
    if target.exists():
        raise PairwiseInputError(f"{run}: policy version {version_name(number)} already exists; an update runs once "
                                 "per version (remove the run's later versions to train again from an earlier one)")
    target.parent.mkdir(parents=True, exist_ok=True)
    discard_partial(target)
    with atomic_folder(target) as folder:
        fill(folder)
        record = {
            "format": VERSION_FORMAT,
            "version": version_name(number),
            "number": number,
            "content_hash": checkpoint_content_hash(folder),
            "parent": None if parent is None else version_name(parent),
            "trained_on": trained_on,
            "written_at": utc_now(),
        }
        (folder / "version.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return record


def export_base_version(run: Path, base_checkpoint: Path, base_hash: str) -> dict:
    """v0000: the base checkpoint's files, copied (hard-linked where the file system allows) into versions/v0000."""

    def fill(folder: Path) -> None:
        for pattern in _CHECKPOINT_FILES:
            for source in Path(base_checkpoint).glob(pattern):
                if source.is_file() and source.name not in ("parent.json", "run.json", "version.json"):
                    _link_or_copy(source, folder / source.name)

    record = write_version(run, 0, fill, parent=None, trained_on={"base_checkpoint": str(Path(base_checkpoint).resolve()),
                                                                  "content_hash": base_hash})
    if record["content_hash"] != base_hash:  # the copy must be the base, byte for byte
        raise PairwiseInputError(f"{run}: versions/v0000 does not hash as base_checkpoint {base_checkpoint} does; the "
                                 "base changed while it was copied")
    return record


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        target.hardlink_to(source)
    except OSError:
        shutil.copy2(source, target)


def copy_inference_weights(version_folder: Path, target: Path) -> None:
    """A version's weights, config and tokenizer without the trainer state: what checkpoint/ holds at the end."""
    target.mkdir(parents=True, exist_ok=True)
    for pattern in _CHECKPOINT_FILES:
        for source in Path(version_folder).glob(pattern):
            if source.is_file() and source.name not in ("version.json", "trainer_state.json"):
                shutil.copy2(source, target / source.name)
