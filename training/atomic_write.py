"""Writing a file or a folder aside and renaming it into place: a reader never sees half of it.

Every writer of Pairwise's outputs (run.json, task files, rollouts, rescores, snapshots, the tiny checkpoint,
backups, task sets) goes through here, so all of them are equally durable: the new content is written to a hidden
sibling `.NAME.partial-<12 hex>` in the target's folder, flushed and fsynced, renamed over the target in one step,
and the folder fsynced so the rename itself survives a power cut. A writer that fails removes its partial file or
folder, leaving the old target or nothing; one that is killed leaves only the hidden partial, which
`discard_partial` removes. The standard library only: the web app and the training command both use it.
"""

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

PARTIAL_MARK = ".partial-"


def partial_path(target: str | os.PathLike) -> Path:
    """A fresh hidden name beside `target` for its content while it is written."""
    target = Path(target)
    return target.with_name(f".{target.name}{PARTIAL_MARK}{uuid.uuid4().hex[:12]}")


def discard_partial(target: str | os.PathLike) -> int:
    """Remove what killed writers left beside `target` (its hidden partial files and folders); returns how many."""
    target = Path(target)
    if not target.parent.is_dir():
        return 0
    leftovers = list(target.parent.glob(f".{target.name}{PARTIAL_MARK}*"))
    for leftover in leftovers:
        _remove(leftover)
    return len(leftovers)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _fsync_tree(folder: Path) -> None:
    # Files first, each folder after what it holds, so every name is durable before the folder that names it.
    for root, _, files in os.walk(folder, topdown=False):
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                _fsync(Path(root, name))
        _fsync(Path(root))


def move_into_place(written: str | os.PathLike, target: str | os.PathLike) -> None:
    """Make a finished file or folder durable, rename it to `target` in one step and make the rename durable.

    A file replaces a file at `target`; a folder replaces only an empty folder there (the rename's own rule)."""
    written, target = Path(written), Path(target)
    if written.is_dir():
        _fsync_tree(written)
    else:
        _fsync(written)
    os.replace(written, target)
    _fsync(target.parent)


@contextmanager
def atomic_path(target: str | os.PathLike, *, private: bool = False) -> Iterator[Path]:
    """The path of an empty hidden file to write `target`'s new content to, for writers that open a path themselves
    (pyarrow, torch.save); on a clean exit it replaces `target`, on an exception it is removed.

    private=True creates it readable by its owner only (the mode `tempfile.mkstemp` gives)."""
    target = Path(target)
    partial = partial_path(target)
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666))
    try:
        yield partial
        move_into_place(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_file(target: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                private: bool = False) -> Iterator[IO]:
    """An open file ("w" text, "wb" bytes) whose content replaces `target` once the block ends without an error."""
    encoding = None if "b" in mode else encoding
    with atomic_path(target, private=private) as partial, open(partial, mode, encoding=encoding) as handle:
        yield handle


def write_text_atomic(target: str | os.PathLike, text: str, *, encoding: str = "utf-8") -> None:
    with atomic_file(target, "w", encoding=encoding) as handle:
        handle.write(text)


def write_bytes_atomic(target: str | os.PathLike, data: bytes) -> None:
    with atomic_file(target, "wb") as handle:
        handle.write(data)


@contextmanager
def atomic_folder(target: str | os.PathLike) -> Iterator[Path]:
    """A new empty hidden folder to fill; on a clean exit it is renamed to `target` (which must not exist, or be an
    empty folder), on an exception it is removed with everything in it."""
    target = Path(target)
    partial = partial_path(target)
    partial.mkdir()
    try:
        yield partial
        move_into_place(partial, target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
