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


def checked_version(run: Path, number: int) -> tuple[dict, float]:
    """version.json of version `number`, after hashing its weights: one line if they are not the weights it names
    (changed after the update wrote them); and the seconds the hashing took (the ledger's hashing_s)."""
    import time

    from training.run_folder import checkpoint_content_hash

    record = read_version(run, number)
    began = time.perf_counter()
    actual = checkpoint_content_hash(version_path(run, number))
    if actual != record["content_hash"]:
        raise PairwiseInputError(f"{version_path(run, number)}: its weights hash {actual}, not the {record['content_hash']} "
                                 "its version.json names; they changed after they were written. Remove this version "
                                 "and the later ones and resume the run from the one before")
    return record, time.perf_counter() - began


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
        readable_as_files_are(folder)
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
    """v0000: the base checkpoint's files, copied (a reflink where the file system allows: shared blocks, copied on
    write) into versions/v0000, never hard-linked: a write to v0000 must not change the base."""

    def fill(folder: Path) -> None:
        for pattern in _CHECKPOINT_FILES:
            for source in Path(base_checkpoint).glob(pattern):
                if source.is_file() and source.name not in ("parent.json", "run.json", "version.json"):
                    _reflink_or_copy(source, folder / source.name)

    record = write_version(run, 0, fill, parent=None, trained_on={"base_checkpoint": str(Path(base_checkpoint).resolve()),
                                                                  "content_hash": base_hash})
    if record["content_hash"] != base_hash:  # the copy must be the base, byte for byte
        raise PairwiseInputError(f"{run}: versions/v0000 does not hash as base_checkpoint {base_checkpoint} does; the "
                                 "base changed while it was copied")
    return record


def _reflink_or_copy(source: Path, target: Path) -> None:
    import fcntl

    ficlone = 0x40049409  # Linux's FICLONE ioctl: the same blocks, copied when either file is written
    with open(source, "rb") as reading, open(target, "wb") as writing:
        try:
            fcntl.ioctl(writing.fileno(), ficlone, reading.fileno())
            return
        except OSError:  # another file system, or one without reflinks
            pass
        shutil.copyfileobj(reading, writing, 16 * 1024 * 1024)


def _file_mode() -> int:
    """The mode a new file gets here (0666 less the umask), read without changing the umask where Linux says it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    import os

    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def readable_as_files_are(folder: Path) -> None:
    """The files of a version or checkpoint folder with the mode a new file gets (0644 under umask 022): the
    weights file is written private (0600) by its writer, and an inference job of another user must read it."""
    mode = _file_mode()
    for path in Path(folder).iterdir():
        if path.is_file() and not path.is_symlink():
            path.chmod(mode)


def copy_inference_weights(version_folder: Path, target: Path) -> None:
    """A version's weights, config and tokenizer without the trainer state: what checkpoint/ holds at the end."""
    target.mkdir(parents=True, exist_ok=True)
    for pattern in _CHECKPOINT_FILES:
        for source in Path(version_folder).glob(pattern):
            if source.is_file() and source.name not in ("version.json", "trainer_state.json"):
                shutil.copy2(source, target / source.name)
    readable_as_files_are(target)


# A file in a version folder that keeps it from retention: whoever registers the folder as a checkpoint writes it.
KEEP_FILE = "KEEP"
RETENTION_RECORD = "retention.json"


def prune_versions(run: Path, *, keep_last: int | None, keep_every: int | None, max_staleness: int,
                   keep: tuple[int, ...] = ()) -> dict:
    """Remove the versions retention lets go: all but the last `keep_last`, every `keep_every`-th, the last
    max_staleness + 2 (a live generate stage may load one of them, and the next update loads the last), the
    versions in `keep` (v0000 as the KL reference) and any holding a KEEP file. Returns the run's retention so far
    (versions/retention.json): the versions removed and the bytes freed."""
    from training.run_folder import write_json_atomic

    record_path = versions_folder(run) / RETENTION_RECORD
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.is_file() else {
        "versions_removed": [], "bytes_freed": 0}
    last = latest_version(run)
    if keep_last is None or last is None:
        return record
    live = max_staleness + 2
    for path in sorted(versions_folder(run).iterdir()):
        if not (path.is_dir() and VERSION_NAME.match(path.name)):
            continue
        number = version_number(path.name)
        if (number > last - max(keep_last, live) or (keep_every and number % keep_every == 0) or number in keep
                or (path / KEEP_FILE).exists()):
            continue
        size = sum(item.stat().st_size for item in path.rglob("*") if item.is_file() and not item.is_symlink())
        discarded = path.with_name(f".{path.name}.removed")
        path.rename(discarded)  # out of sight at once: never a half-removed version
        shutil.rmtree(discarded)
        record["versions_removed"].append(path.name)
        record["bytes_freed"] += size
    write_json_atomic(record_path, record)
    return record
