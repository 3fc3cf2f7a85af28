"""The run folder and lineage: run.json, metrics.jsonl, ledger.json, and checkpoint content hashes.

A checkpoint is identified by what it holds, not where it lies: its content hash covers the weight files
(names and bytes), so a copied or renamed checkpoint keeps its identity and a retrained one does not.
"""

import datetime
import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from training.atomic_write import write_text_atomic
from training.errors import PairwiseInputError
from training.json_input import read_json_file
from training.snapshot import file_sha256

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model*.bin", "adapter_model.bin")
RUN_FORMAT = "pairwise.run/1"


class RecordStatus:
    """run.json's `status`, as the training commands write it and the app reads it (annotate/runs/folder.py)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # stopped by a signal (a cancel, Ctrl-C); resumable from its last checkpoint


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def weight_files(checkpoint: Path) -> list[Path]:
    found: set[Path] = set()
    for pattern in WEIGHT_PATTERNS:
        found.update(p for p in checkpoint.glob(pattern) if p.is_file())
    return sorted(found)


def checkpoint_content_hash(checkpoint: str | os.PathLike) -> str:
    """sha256 over the weight files of a checkpoint folder: each file's name, then its bytes' sha256."""
    folder = Path(checkpoint)
    files = weight_files(folder)
    if not files:
        raise PairwiseInputError(f"checkpoint {folder} holds no weight files (*.safetensors or *.bin)")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + file_sha256(path).encode() + b"\n")
    return "sha256:" + digest.hexdigest()


def check_causal_lm_checkpoint(path: str | os.PathLike, *, key: str = "base_checkpoint") -> Path:
    """Raise PairwiseInputError unless `path` is a local Hugging Face causal-LM checkpoint with a tokenizer."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = _checked_checkpoint_config(path, key=key)
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise PairwiseInputError(f"{key} {path} is a {config.model_type!r} model, not a causal language model; "
                                 "DPO needs a causal LM (AutoModelForCausalLM)")
    return _checked_checkpoint_files(path, key=key)


def check_sequence_classifier_checkpoint(path: str | os.PathLike, *, key: str = "base_checkpoint") -> Path:
    """Raise PairwiseInputError unless `path` is a local checkpoint with a tokenizer that
    AutoModelForSequenceClassification loads with one output (a causal LM gets a new score head)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    config = _checked_checkpoint_config(path, key=key)
    if config.model_type not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        raise PairwiseInputError(f"{key} {path} is a {config.model_type!r} model, which "
                                 "AutoModelForSequenceClassification cannot load, so it cannot become a reward model; "
                                 "start from a causal LM or sequence-classifier checkpoint")
    is_classifier = any(name.endswith("ForSequenceClassification") for name in config.architectures or [])
    if is_classifier and config.num_labels != 1:
        raise PairwiseInputError(f"{key} {path} is a classifier with {config.num_labels} outputs, but a reward model "
                                 "has one; start from its causal LM checkpoint instead")
    return _checked_checkpoint_files(path, key=key)


def check_reward_model_checkpoint(path: str | os.PathLike, *, key: str = "reward_model") -> Path:
    """Raise PairwiseInputError unless `path` is a trained reward model: a local sequence classifier with one
    output. A causal LM is refused, because loading it as a classifier gives a new, untrained score head whose
    numbers mean nothing."""
    check_sequence_classifier_checkpoint(path, key=key)
    architectures = _checked_checkpoint_config(path, key=key).architectures or []
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise PairwiseInputError(f"{key} {path} is not a trained reward model: its config.json's architecture "
                                 f"({', '.join(architectures) or 'not given'}) is not a sequence classifier, so it has "
                                 "no trained score head; train one with python -m training reward and give its "
                                 "RUN/checkpoint")
    return Path(path)


def _checked_checkpoint_config(path: str | os.PathLike, *, key: str):
    """The config.json of a local checkpoint folder, or PairwiseInputError saying what is missing."""
    from transformers import AutoConfig

    folder = Path(path)
    if not folder.is_dir():
        raise PairwiseInputError(f"{key} {folder} does not exist or is not a folder; give the path of a local "
                                 "Hugging Face checkpoint (python -m training tiny-sft --out DIR makes one)")
    if not (folder / "config.json").is_file():
        raise PairwiseInputError(f"{key} {folder} has no config.json, so it is not a Hugging Face checkpoint; "
                                 "save the model with save_pretrained")
    try:
        return AutoConfig.from_pretrained(folder, local_files_only=True)
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PairwiseInputError(f"{key} {folder}: config.json cannot be read ({first_line})") from None


def _checked_checkpoint_files(path: str | os.PathLike, *, key: str) -> Path:
    """`path` as a Path once it holds weight files and tokenizer files, or PairwiseInputError."""
    folder = Path(path)
    if not weight_files(folder):
        raise PairwiseInputError(f"{key} {folder} has no weight files (*.safetensors or *.bin); "
                                 "was save_pretrained interrupted?")
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise PairwiseInputError(f"{key} {folder} has no tokenizer files; save the tokenizer beside the model "
                                 "with tokenizer.save_pretrained")
    return folder


def hardware() -> dict:
    import torch

    info: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda_devices": [],
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
    }
    if torch.cuda.is_available():
        info["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def library_versions() -> dict:
    from importlib import metadata

    versions = {}
    for name in ("torch", "transformers", "trl", "datasets", "accelerate", "peft"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def checkpoint_run_record(checkpoint: str | os.PathLike) -> dict | None:
    """run.json of the run folder a checkpoint was saved in (RUN/checkpoint), when there is one."""
    return read_json_file(Path(checkpoint).parent / "run.json")


def checkpoint_parent_record(checkpoint: str | os.PathLike) -> dict | None:
    """A trained checkpoint's parent.json (write_parent_json), when there is one."""
    return read_json_file(Path(checkpoint) / "parent.json")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON aside and rename, so a reader (the web app polling a run) never sees half a file."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


class RunFolder:
    """One training run's folder: run.json (kept current), metrics.jsonl (appended), ledger.json."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.run_json = self.path / "run.json"
        self.metrics_jsonl = self.path / "metrics.jsonl"
        self.ledger_json = self.path / "ledger.json"
        self.checkpoint = self.path / "checkpoint"
        self.trainer_checkpoints = self.path / "trainer_checkpoints"
        self.tensorboard = self.path / "tensorboard"
        self.record: dict = {}

    def read_record(self) -> dict | None:
        return read_json_file(self.run_json)

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def update(self, **fields: Any) -> None:
        self.record.update(fields)
        write_json_atomic(self.run_json, self.record)

    def append_metrics(self, row: dict) -> None:
        with open(self.metrics_jsonl, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, sort_keys=True) + "\n")

    def write_ledger(self, ledger: dict) -> None:
        write_json_atomic(self.ledger_json, ledger)

    def read_metrics(self) -> list[dict]:
        try:
            return metrics_rows(self.metrics_jsonl.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return []


def metrics_rows(text: str) -> list[dict]:
    """metrics.jsonl's rows in `text`; a line that is not a JSON object (one still being written) is skipped."""
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _zero_variance_reason(groups: dict) -> str | None:
    """Every group's rewards equal (GRPO's ledger): no answer had an advantage, so no gradient."""
    total = groups.get("groups") or 0
    if not total or groups.get("zero_variance") != total:
        return None
    wrong, right = groups.get("all_wrong") or 0, groups.get("all_correct") or 0
    if wrong == total:
        alike = f"every group's answers were all wrong ({total} of {total} groups)"
    elif right == total:
        alike = f"every group's answers were all right ({total} of {total} groups)"
    else:
        alike = (f"every group's answers scored alike ({total} groups: {wrong} all wrong, {right} all right, "
                 f"{total - wrong - right} with equal partial rewards or fewer than two scored answers)")
    return alike + ", so no answer had an advantage to learn from"


def weights_unchanged_reason(record: dict, metrics: list[dict]) -> str:
    """Why a finished run's output holds its base's very weights, from the figures it recorded: its steps, the
    learning rate of every logged step, its gradients, and (GRPO) its groups."""
    reasons = []
    steps = record.get("steps")
    if steps == 0:
        reasons.append("it took no optimizer step")
    train = [row for row in metrics if row.get("event", "train") == "train"]
    rates = [row["learning_rate"] for row in train if isinstance(row.get("learning_rate"), int | float)]
    if rates and not any(rates):
        reasons.append("the learning rate was 0 at every logged step (a warmup longer than the run, or a schedule "
                       "that ends at 0)")
    groups = ((record.get("results") or {}).get("ledger") or {}).get("groups") or {}
    if (alike := _zero_variance_reason(groups)) is not None:
        reasons.append(alike)
    norms = [row["grad_norm"] for row in train if isinstance(row.get("grad_norm"), int | float)]
    if not reasons and norms and not any(norms):
        reasons.append("every gradient was zero")
    if not reasons:
        rate = (record.get("config") or {}).get("learning_rate")
        reasons.append(f"its {steps} optimizer steps at learning rate {rate} moved no weight")
    return "; ".join(reasons)


def weights_outcome(record: dict, metrics: list[dict], *, changed: bool | None = None) -> dict:
    """run.json's weights_changed (None when a hash is unknown) and, when the output checkpoint holds the base's
    very weights (the same content hash), weights_unchanged_reason. `changed` decides instead of the hashes
    when the output cannot have the base's hash (a reward model: the base with a new score head)."""
    if changed is None:
        base = (record.get("base_checkpoint") or {}).get("content_hash")
        output = (record.get("output_checkpoint") or {}).get("content_hash")
        if not base or not output:
            return {"weights_changed": None, "weights_unchanged_reason": None}
        changed = output != base
    if changed:
        return {"weights_changed": True, "weights_unchanged_reason": None}
    return {"weights_changed": False, "weights_unchanged_reason": weights_unchanged_reason(record, metrics)}


def write_parent_json(checkpoint: Path, *, parent_path: str, parent_hash: str, run: str, kind: str,
                      snapshot_id: str | None, content_hash: str, weights_changed: bool | None = None,
                      reward_model: dict | None = None) -> None:
    """parent.json inside a trained checkpoint: where it came from, by content, and whether it differs from it
    (a run that changed no weight leaves a copy of its parent, which is no model of its own). `weights_changed`
    is given when the hashes cannot tell (see weights_outcome). A GRPO child trained on a reward model names it
    ({"path", "content_hash"}): which reward model shaped it."""
    write_json_atomic(checkpoint / "parent.json", {
        "parent": {"path": str(Path(parent_path).resolve()), "content_hash": parent_hash},
        "content_hash": content_hash,
        "weights_changed": content_hash != parent_hash if weights_changed is None else weights_changed,
        "run": run,
        "kind": kind,
        "snapshot_id": snapshot_id,
        **({"reward_model": reward_model} if reward_model is not None else {}),
    })
