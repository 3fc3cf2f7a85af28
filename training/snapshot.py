"""The snapshot format: the boundary between the web app (which writes) and training (which reads).

A snapshot is a folder written once and never changed:

    manifest.json   format version, provenance, counts and the sha256 of every data file
    train.jsonl     TRL preference rows: {"prompt", "chosen", "rejected", "meta"}
    test.jsonl      same; split by prompt, so no prompt is in both

(`.parquet` instead of `.jsonl` with the Parquet option.) `SnapshotWriter` streams rows to disk inside a
hidden sibling folder and renames it into place only when everything, manifest included, is written, so a
reader never sees half a snapshot. `load` checks the format version and every hash before any trainer
sees a row. docs/snapshot-format.md is the user-facing description.

This module must stay importable by the web app: only the standard library at import time; pyarrow and
datasets are imported where they are needed.
"""

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson

from training.atomic_write import (
    atomic_folder,
    discard_partial,  # noqa: F401 - the snapshot format's documented name for it
)
from training.errors import PairwiseInputError

FORMAT = "pairwise.snapshot/1"
FORMAT_FAMILY = "pairwise.snapshot/"
MANIFEST = "manifest.json"
SPLITS = ("train", "test")
ROW_FORMATS = ("conversational", "standard")
FILE_FORMATS = ("jsonl", "parquet")
ROLES = ("system", "user", "assistant")
ROW_KEYS = ("prompt", "chosen", "rejected", "meta")
PARQUET_ROWS_PER_GROUP = 1000  # rows buffered before a Parquet row group is flushed: bounds writer memory
HASH_CHUNK = 1 << 20


class SnapshotError(PairwiseInputError):
    """A snapshot that cannot be trusted or read: missing, tampered, unknown version, malformed."""


def _canonical_json(value: Any, *, indent: int | None = None) -> str:
    """Sorted keys, UTF-8, no spaces (or two-space indents): the same value always gives the same text.

    Rows go through orjson, which is several times faster than the standard library on the export's
    hot path; its output is just as canonical (it only spells some floats differently, e.g. 1e-7).
    """
    if indent is None:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return json.dumps(value, sort_keys=True, ensure_ascii=False, indent=indent)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# --- rows ----------------------------------------------------------------------------------------------


def _check_messages(value: Any, what: str) -> None:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{what} must be a non-empty list of messages")
    for message in value:
        if not isinstance(message, Mapping) or set(message) != {"role", "content"}:
            raise ValueError(f"{what}: each message must be exactly {{'role', 'content'}}, got {message!r}")
        if message["role"] not in ROLES or not isinstance(message["content"], str):
            raise ValueError(f"{what}: role must be one of {ROLES} and content a string, got {message!r}")


def check_row(row: Mapping, row_format: str) -> None:
    """Raise ValueError unless `row` is a preference row of `row_format`."""
    if not isinstance(row, Mapping) or set(row) != set(ROW_KEYS):
        raise ValueError(f"a preference row has exactly prompt, chosen, rejected, meta; got {sorted(row) if isinstance(row, Mapping) else type(row).__name__}")
    if not isinstance(row["meta"], Mapping):
        raise ValueError("meta must be an object")
    if row_format == "conversational":
        _check_messages(row["prompt"], "prompt")
        for key in ("chosen", "rejected"):
            _check_messages(row[key], key)
            if any(m["role"] != "assistant" for m in row[key]):
                raise ValueError(f"{key} must hold assistant messages only")
    else:
        for key in ("prompt", "chosen", "rejected"):
            if not isinstance(row[key], str):
                raise ValueError(f"{key} must be a plain string in the standard format")


def preference_row(*, prompt: str | list[dict], chosen: str, rejected: str, meta: Mapping | None = None,
                   row_format: str = "conversational") -> dict:
    """Shape one judgment's prompt and two response texts as a TRL preference row.

    `prompt` is a string or a list of chat messages. The standard format needs a single-turn prompt, since
    a plain string cannot keep the roles of several messages.
    """
    meta = dict(meta or {})
    if row_format == "conversational":
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        return {
            "prompt": messages,
            "chosen": [{"role": "assistant", "content": chosen}],
            "rejected": [{"role": "assistant", "content": rejected}],
            "meta": meta,
        }
    if row_format != "standard":
        raise ValueError(f"row_format must be one of {ROW_FORMATS}, got {row_format!r}")
    if not isinstance(prompt, str):
        if len(prompt) != 1 or prompt[0].get("role") != "user":
            raise ValueError("the standard format needs a single user message as prompt; use the conversational format")
        prompt = prompt[0]["content"]
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected, "meta": meta}


def prompt_key(prompt: str | list[Mapping]) -> str:
    """A prompt's identity, what "the same prompt" means everywhere: sha256 hex of its chat messages'
    canonical JSON, a plain-string prompt being one user message.

    Two import ids with one text share a key, and so do a prompt's standard and conversational rows: what
    leaks between train and test is the text, not the id. The writer's one-split-per-prompt check and the
    web app's split both use it.
    """
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    return hashlib.sha256(_canonical_json(messages).encode()).hexdigest()


# --- writing -------------------------------------------------------------------------------------------


class _JsonlSplitWriter:
    def __init__(self, path: Path):
        self.path = path
        self._handle = open(path, "wb")  # noqa: SIM115 - open across add() calls

    def write(self, row: Mapping) -> None:
        # _canonical_json's text, written as the UTF-8 bytes orjson makes (no decode and encode again per row).
        self._handle.write(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) + b"\n")

    def close(self) -> None:
        self._handle.close()


def _parquet_schema(row_format: str):
    import pyarrow as pa

    message = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    text = message if row_format == "conversational" else pa.string()
    # meta is kept as JSON text: its keys and value types vary between projects and rows.
    return pa.schema([("prompt", text), ("chosen", text), ("rejected", text), ("meta", pa.string())])


class _ParquetSplitWriter:
    def __init__(self, path: Path, row_format: str):
        import pyarrow.parquet as pq

        self.path = path
        self._schema = _parquet_schema(row_format)
        self._writer = pq.ParquetWriter(path, self._schema)
        self._buffer: list[dict] = []

    def write(self, row: dict) -> None:
        self._buffer.append({**row, "meta": _canonical_json(row["meta"])})
        if len(self._buffer) >= PARQUET_ROWS_PER_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._buffer:
            self._writer.write_table(pa.Table.from_pylist(self._buffer, schema=self._schema))
            self._buffer = []

    def close(self) -> None:
        if self._writer is not None:
            self._flush()
            self._writer.close()
            self._writer = None


def code_version() -> dict:
    """Which Pairwise is running: package version and, in a git checkout, the commit and whether tracked
    files had changes. Recorded in snapshot manifests and run folders."""
    from importlib import metadata

    try:
        version = metadata.version("pairwise")
    except metadata.PackageNotFoundError:
        version = None
    repo = Path(__file__).resolve().parent.parent
    commit = dirty = None
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5).stdout.strip() or None
        if commit:
            status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=5).stdout
            dirty = bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        pass  # no git on a GPU node is fine: the package version still says what ran
    return {"package": version, "git_commit": commit, "git_dirty": dirty}


class SnapshotWriter:
    """Write a snapshot row by row, atomically.

        with SnapshotWriter(out_dir, project="speed", created_at="2025-01-01T00:00:00Z",
                            criteria_version=3, filters={...}, agreement={...}) as writer:
            writer.add_pair("train", prompt=..., chosen=..., rejected=..., meta={...})

    Rows go straight to files inside a hidden sibling folder (what stays in memory is a key per prompt, about 90
    bytes, for the split check and the prompt counts); on a
    clean exit the manifest is written and the folder renamed to `out_dir`; on an exception the hidden
    folder is removed and `out_dir` never appears. `created_at` comes from the caller so that the same
    inputs give byte-identical files. `snapshot_id` defaults to a hash of the manifest's content.

    Provenance that is only known once every row is written may be set on the writer before the block
    ends: `writer.agreement`, `writer.criteria_version`, `writer.extra_counts`, `writer.snapshot_id`.
    The default snapshot id hashes the whole manifest except `created_at`.
    """

    def __init__(self, out_dir: str | os.PathLike, *, project: str, created_at: str,
                 criteria_version: int | str | None, filters: Mapping, agreement: Mapping | None = None,
                 counts: Mapping | None = None, snapshot_id: str | None = None,
                 row_format: str = "conversational", file_format: str = "jsonl",
                 code_version: Mapping | None = None):
        if row_format not in ROW_FORMATS:
            raise ValueError(f"row_format must be one of {ROW_FORMATS}, got {row_format!r}")
        if file_format not in FILE_FORMATS:
            raise ValueError(f"file_format must be one of {FILE_FORMATS}, got {file_format!r}")
        self.out_dir = Path(out_dir)
        self.project = project
        self.created_at = created_at
        self.criteria_version = criteria_version
        self.filters = dict(filters)
        self.agreement = dict(agreement) if agreement is not None else None
        self.extra_counts = dict(counts or {})
        if set(self.extra_counts) & {*SPLITS, "prompts"}:
            raise ValueError("counts may not set 'train', 'test' or 'prompts': the writer counts those")
        self.snapshot_id = snapshot_id
        self.code_version = dict(code_version) if code_version is not None else None
        self.row_format = row_format
        self.file_format = file_format
        self.manifest: dict | None = None
        self._folder: ExitStack | None = None  # holds the hidden folder the rows go to (atomic_folder)
        self._tmp: Path | None = None
        self._writers: dict = {}
        self._rows = dict.fromkeys(SPLITS, 0)
        self._prompts: dict[str, set[int]] = {split: set() for split in SPLITS}

    def file_name(self, split: str) -> str:
        return f"{split}.{self.file_format}"

    def __enter__(self) -> "SnapshotWriter":
        if self.out_dir.exists():
            raise FileExistsError(f"snapshot folder {self.out_dir} already exists; a snapshot is never overwritten")
        if not self.out_dir.parent.is_dir():
            raise FileNotFoundError(f"parent folder {self.out_dir.parent} does not exist")
        with ExitStack() as folder:  # a writer that cannot start removes the hidden folder again
            self._tmp = folder.enter_context(atomic_folder(self.out_dir))
            for split in SPLITS:
                path = self._tmp / self.file_name(split)
                if self.file_format == "jsonl":
                    self._writers[split] = _JsonlSplitWriter(path)
                else:
                    self._writers[split] = _ParquetSplitWriter(path, self.row_format)
            self._folder = folder.pop_all()
        return self

    def _check_open(self, split: str) -> None:
        if self._tmp is None:
            raise RuntimeError("use SnapshotWriter as a context manager: with SnapshotWriter(...) as writer")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")

    def add_row(self, split: str, row: Mapping) -> None:
        """Add one ready-made preference row. A prompt may appear in one split only."""
        self._check_open(split)
        check_row(row, self.row_format)
        self._add_checked(split, row)

    def _add_checked(self, split: str, row: Mapping) -> None:
        # The key's first 128 bits as an int: 48 bytes a prompt in the set, against 72 for its 32 bytes, and still
        # a collision only past about 2**64 prompts. These sets are what an export's memory grows with.
        key = int(prompt_key(row["prompt"])[:32], 16)
        other = "test" if split == "train" else "train"
        if key in self._prompts[other]:
            raise ValueError(f"this prompt (the same messages) is already in the {other} split; a snapshot "
                             "splits by prompt text")
        self._prompts[split].add(key)
        self._writers[split].write(row)
        self._rows[split] += 1

    def add_pair(self, split: str, *, prompt: str | list[dict], chosen: str, rejected: str,
                 meta: Mapping | None = None) -> None:
        """Add one judgment: the preferred response text first, then the other.

        Checks what it was given (the prompt's messages, two strings), not again the answer messages it builds
        from them (an export's hot path)."""
        self._check_open(split)
        if not isinstance(chosen, str) or not isinstance(rejected, str):
            raise ValueError("chosen and rejected must be response texts (strings)")
        row = preference_row(prompt=prompt, chosen=chosen, rejected=rejected, meta=meta, row_format=self.row_format)
        if self.row_format == "conversational":
            _check_messages(row["prompt"], "prompt")
        elif not isinstance(row["prompt"], str):
            raise ValueError("prompt must be a plain string in the standard format")
        self._add_checked(split, row)

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            for writer in self._writers.values():
                writer.close()
            manifest = self._finish() if exc_type is None else None
        except BaseException as error:
            self._folder.__exit__(type(error), error, error.__traceback__)  # removes the hidden folder
            raise
        finally:
            self._tmp = None
        self._folder.__exit__(exc_type, exc, tb)  # renames the folder to out_dir on a clean exit, else removes it
        self.manifest = manifest
        return False  # never swallow the caller's exception

    def _finish(self) -> dict:
        """Hash the files and write the manifest into the hidden folder; returns the manifest."""
        if set(self.extra_counts) & {*SPLITS, "prompts"}:
            raise ValueError("extra counts may not set 'train', 'test' or 'prompts': the writer counts those")
        files = {self.file_name(split): file_sha256(self._tmp / self.file_name(split)) for split in SPLITS}
        counts = {
            **self.extra_counts,
            **self._rows,
            "prompts": {split: len(self._prompts[split]) for split in SPLITS},
        }
        manifest = {
            "format": FORMAT,
            "project": self.project,
            "created_at": self.created_at,
            "criteria_version": self.criteria_version,
            "filters": self.filters,
            "counts": counts,
            "agreement": self.agreement,
            "row_format": self.row_format,
            "code_version": self.code_version,
            "files": files,
        }
        # Content-addressed by default: the same rows and provenance give the same id, whenever written.
        content = {key: value for key, value in manifest.items() if key != "created_at"}
        manifest["snapshot_id"] = self.snapshot_id or "snap-" + hashlib.sha256(
            _canonical_json(content).encode()).hexdigest()[:16]
        manifest_path = self._tmp / MANIFEST
        with open(manifest_path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(_canonical_json(manifest, indent=2) + "\n")
        if self.out_dir.exists():
            raise FileExistsError(f"snapshot folder {self.out_dir} appeared while writing; not overwriting it")
        return manifest


# --- reading -------------------------------------------------------------------------------------------


def read_manifest(path: str | os.PathLike) -> dict:
    """The manifest of the snapshot at `path`, checked for shape and version (hashes not yet checked)."""
    folder = Path(path)
    manifest_path = folder / MANIFEST
    if not folder.is_dir():
        raise SnapshotError(f"snapshot {folder} does not exist or is not a folder; check the snapshot path")
    if not manifest_path.is_file():
        raise SnapshotError(f"snapshot {folder}: {MANIFEST} is missing; is this a Pairwise snapshot folder?")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SnapshotError(f"snapshot {folder}: {MANIFEST} is not valid JSON ({error}); re-export the snapshot") from None
    if not isinstance(manifest, dict):
        raise SnapshotError(f"snapshot {folder}: {MANIFEST} must hold a JSON object; re-export the snapshot")
    version = manifest.get("format")
    if version != FORMAT:
        if isinstance(version, str) and version.startswith(FORMAT_FAMILY):
            raise SnapshotError(f"snapshot {folder}: {MANIFEST} has format {version!r}, which this Pairwise cannot "
                                f"read (it reads {FORMAT!r}); upgrade Pairwise or re-export the snapshot")
        raise SnapshotError(f"snapshot {folder}: {MANIFEST} has format {version!r}, expected {FORMAT!r}; "
                            "is this a Pairwise snapshot folder?")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise SnapshotError(f"snapshot {folder}: {MANIFEST} has no 'files' table; re-export the snapshot")
    for name, digest in files.items():
        if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
            raise SnapshotError(f"snapshot {folder}: {MANIFEST} lists {name!r}, which is not a plain file name")
        if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
            raise SnapshotError(f"snapshot {folder}: {MANIFEST} has no valid sha256 for {name}; re-export the snapshot")
    for split in SPLITS:
        if _split_file(manifest, split) is None:
            raise SnapshotError(f"snapshot {folder}: {MANIFEST} lists no {split} file; re-export the snapshot")
    if manifest.get("row_format", "conversational") not in ROW_FORMATS:
        raise SnapshotError(f"snapshot {folder}: {MANIFEST} has unknown row_format {manifest.get('row_format')!r}")
    return manifest


def _split_file(manifest: dict, split: str) -> str | None:
    for file_format in FILE_FORMATS:
        name = f"{split}.{file_format}"
        if name in manifest["files"]:
            return name
    return None


def verify(path: str | os.PathLike) -> dict:
    """Check the version and every file's sha256; return the manifest. Raises SnapshotError naming the file."""
    folder = Path(path)
    manifest = read_manifest(folder)
    for name, expected in sorted(manifest["files"].items()):
        file_path = folder / name
        if not file_path.is_file():
            raise SnapshotError(f"snapshot {folder}: {name} is listed in {MANIFEST} but missing; re-export the snapshot")
        if file_sha256(file_path) != expected:
            raise SnapshotError(f"snapshot {folder}: {name} does not match its sha256 in {MANIFEST} (the file was "
                                "changed or damaged after export); re-export the snapshot")
    return manifest


def _iter_split_rows(folder: Path, name: str) -> Iterator[dict]:
    if name.endswith(".jsonl"):
        with open(folder / name, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise SnapshotError(f"snapshot {folder}: {name} line {number} is not valid JSON ({error})") from None
    else:
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(folder / name).iter_batches(batch_size=PARQUET_ROWS_PER_GROUP):
            for row in batch.to_pylist():
                row["meta"] = json.loads(row["meta"]) if row["meta"] is not None else {}
                yield row


def iter_rows(path: str | os.PathLike, split: str, *, manifest: dict | None = None) -> Iterator[dict]:
    """Rows of one split as plain dicts, each checked. Verifies the snapshot first unless `manifest` is given
    (the manifest `verify` returned)."""
    folder = Path(path)
    manifest = manifest or verify(folder)
    name = _split_file(manifest, split)
    row_format = manifest.get("row_format", "conversational")
    count = 0
    for row in _iter_split_rows(folder, name):
        count += 1
        try:
            check_row(row, row_format)
        except ValueError as error:
            raise SnapshotError(f"snapshot {folder}: {name} row {count}: {error}") from None
        yield {key: row[key] for key in ROW_KEYS}
    expected = manifest.get("counts", {}).get(split)
    if isinstance(expected, int) and expected != count:
        raise SnapshotError(f"snapshot {folder}: {name} holds {count} rows but {MANIFEST} counts {expected}")


def dataset_features(row_format: str):
    """The Hugging Face features of a snapshot split; `meta` is free-form JSON."""
    from datasets import Features, Json, List, Value

    if row_format == "conversational":
        text = List({"role": Value("string"), "content": Value("string")})
    else:
        text = Value("string")
    return Features({"prompt": text, "chosen": text, "rejected": text, "meta": Json()})


def load(path: str | os.PathLike):
    """Verify the snapshot at `path` and return a `datasets.DatasetDict` with `train` and `test`.

    Rows are in TRL's preference format, so `DPOTrainer(train_dataset=load(p)["train"], ...)` reads them as
    they are. The manifest itself comes from `verify` or `read_manifest`.
    Raises SnapshotError (a ValueError) naming the file for a missing, tampered or unknown-version snapshot.
    """
    from datasets import Dataset, DatasetDict

    folder = Path(path)
    manifest = verify(folder)
    features = dataset_features(manifest.get("row_format", "conversational"))
    splits = {}
    for split in SPLITS:
        columns: dict[str, list] = {key: [] for key in ROW_KEYS}  # columns, so an empty split still has them
        for row in iter_rows(folder, split, manifest=manifest):
            for key in ROW_KEYS:
                columns[key].append(row[key])
        splits[split] = Dataset.from_dict(columns, features=features)
    return DatasetDict(splits)
