"""The demo's SFT checkpoint `tiny-sft`: shipped, or built as a run.

No model hub is reachable, and training `python -m training tiny-sft`'s 320 steps takes minutes on a small machine
(docs/benchmarks/demo_start.md), so a fresh demo would keep an engineer waiting. Pairwise therefore ships
the recipe's output (about 4 MB, annotate/runs/demo_files/tiny-sft/) with a manifest of its recipe and the sha256
of every file. `manage.py seed_demo` checks the files against the manifest, copies them into the data folder and
registers them (`demo_checkpoint_install`), so launching works the moment the server answers. A test rebuilds the
checkpoint from the manifest's recipe and compares (tests/runs/test_demo_checkpoint_shipped.py);
`manage.py ship_demo_checkpoint` writes new files and manifest after the recipe changes.

A checkpoint can still be built from the recipe as a run of kind "sft" (`manage.py build_demo_checkpoint`, or the
runs page when no checkpoint is registered): the runs page shows its progress and the Launch button waits for it.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from annotate.errors import UserMistake
from annotate.limits import MAX_INT32, whole_number
from annotate.runs.checkpoints import checkpoint_register
from annotate.runs.models import Checkpoint, Run
from annotate.runs.queue import run_folder_for, send
from training.atomic_write import atomic_folder, discard_partial
from training.run_folder import checkpoint_content_hash
from training.snapshot import file_sha256

DEMO_CHECKPOINT = "tiny-sft"
DEMO_STEPS = 320  # tiny-sft's own default recipe; PAIRWISE_DEMO_SFT_STEPS or build_demo_checkpoint --steps change it
CHECKPOINT_FOLDER = "checkpoint"
STEP_LINE = re.compile(r"step\s+(\d+)\s*/\s*(\d+)")
STEP_LOSS_LINE = re.compile(r"step\s+(\d+)\s*/\s*\d+\s+loss\s+([0-9.]+)")
SHIPPED_FOLDER = Path(__file__).resolve().parent / "demo_files" / DEMO_CHECKPOINT
SHIPPED_MANIFEST = SHIPPED_FOLDER.with_name(f"{DEMO_CHECKPOINT}.manifest.json")
MANIFEST_FORMAT = "pairwise.shipped-checkpoint/1"
RECIPE_RECORD = "tiny_sft.json"  # what build_tiny_sft writes beside the weights: recipe, config, held-out figures


def folder_file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file in a checkpoint folder, by its name."""
    return {path.name: file_sha256(path) for path in sorted(folder.iterdir()) if path.is_file()}


def shipped_manifest_write(folder: Path = SHIPPED_FOLDER, manifest: Path = SHIPPED_MANIFEST) -> dict:
    """The manifest of a checkpoint built by the tiny-sft recipe: its recipe and config (from the recipe's own
    record), the content hash a registered checkpoint gets, every file's sha256, the losses of the recipe's first
    steps (run again here: the quick check that today's recipe is the one shipped), and where it was built (floating
    point sums differ between processors, so a rebuild elsewhere may differ in the last bits)."""
    from training.tiny import FIRST_STEPS, TinySFTConfig, tiny_sft_first_steps

    record = json.loads((folder / RECIPE_RECORD).read_text())
    with tempfile.TemporaryDirectory(prefix="pairwise-first-steps-") as scratch:
        first = tiny_sft_first_steps(Path(scratch) / "first", TinySFTConfig(**record["config"]))
    value = {"format": MANIFEST_FORMAT, "name": folder.name, "recipe": record["recipe"], "config": record["config"],
             "first_losses": {"steps": FIRST_STEPS, "losses": [round(loss, 6) for loss in first]},
             "content_hash": checkpoint_content_hash(folder), "files": folder_file_hashes(folder),
             "built_with": {"torch": version("torch"), "transformers": version("transformers"),
                            "processor": processor_name(), "train_s": record.get("train_s")}}
    manifest.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n")
    return value


def processor_name() -> str:
    """The CPU's model name (Linux), else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def shipped_manifest(manifest: Path | None = None) -> dict:
    manifest = manifest or SHIPPED_MANIFEST
    value = json.loads(manifest.read_text())
    if value.get("format") != MANIFEST_FORMAT:
        raise UserMistake(f"{manifest}: format {value.get('format')!r} is not {MANIFEST_FORMAT}")
    return value


def shipped_files_checked(folder: Path, recorded: dict) -> None:
    """Raise UserMistake unless `folder` holds exactly the files of the manifest, byte for byte."""
    found = folder_file_hashes(folder)
    differing = sorted(name for name in found.keys() | recorded["files"].keys()
                       if found.get(name) != recorded["files"].get(name))
    if differing:
        raise UserMistake(f"the demo checkpoint files in {folder} differ from their manifest ({', '.join(differing)}); "
                          "restore them (git checkout annotate/runs/demo_files) or rebuild them with "
                          "manage.py ship_demo_checkpoint")


def demo_checkpoint_install(*, source: Path | None = None, manifest: Path | None = None,
                            registered_by: AbstractBaseUser | None = None) -> Checkpoint | None:
    """Register the shipped demo checkpoint as `tiny-sft`, unless its weights are registered already (under any
    name) or a checkpoint of that name exists (None).

    The files are checked against the manifest's sha256s, copied into the data folder (a run may write beside its
    base; the repository's copy stays as shipped), checked again there, and registered with the manifest's content
    hash, so what is registered is what the recipe made."""
    source = source or SHIPPED_FOLDER
    recorded = shipped_manifest(manifest or SHIPPED_MANIFEST)
    name = recorded["name"]
    # Registered already: these weights under any name (renamed since), or a checkpoint of that name of one's own.
    if Checkpoint.objects.filter(content_hash=recorded["content_hash"]).exists() or \
            Checkpoint.objects.filter(name=name).exists():
        return None
    shipped_files_checked(source, recorded)
    target = Path(settings.DATA_DIR) / "demo-checkpoint" / name
    if target.exists():  # a copy left by an earlier demo whose database was reset: copied anew
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    discard_partial(target)
    with atomic_folder(target) as partial:
        for file_name in recorded["files"]:
            shutil.copyfile(source / file_name, partial / file_name)
        shipped_files_checked(partial, recorded)
    return checkpoint_register(uri=str(target), name=name, content_hash=recorded["content_hash"],
                               registered_by=registered_by)


def demo_checkpoint_queue(*, steps: int = DEMO_STEPS, seed: int = 0, name: str = DEMO_CHECKPOINT,
                          launched_by: AbstractBaseUser | None = None, enqueue: bool = True) -> Run | None:
    """Queue the build of the demo checkpoint, unless it is registered already (None) or a build is under way
    (that run). With `enqueue`, it goes to the training queue after commit like any run."""
    steps = whole_number("steps", steps, low=1, high=1_000_000)
    seed = whole_number("seed", seed, low=0, high=MAX_INT32)
    if "=" in name or not name.strip():
        raise UserMistake(f"checkpoint name {name!r} may not contain '=' or be blank")
    with transaction.atomic():
        if Checkpoint.objects.filter(name=name).exists():
            return None
        under_way = sft_build_under_way()
        if under_way is not None:
            return under_way
        run = Run.objects.create(kind=Run.Kind.SFT, launched_by=launched_by, folder="")
        run.folder = str(run_folder_for(run.pk))
        run.config = run.resolved_config = {"recipe": "tiny-sft", "steps": steps, "seed": seed, "name": name}
        run.save(update_fields=["folder", "config", "resolved_config"])
        if enqueue:
            transaction.on_commit(lambda: send(run.pk))
    return run


def sft_build_under_way() -> Run | None:
    return Run.objects.filter(kind=Run.Kind.SFT).exclude(status__in=Run.FINISHED).order_by("-id").first()


def sft_command_args(run: Run) -> list[str]:
    Path(run.folder).mkdir(parents=True, exist_ok=True)  # tiny-sft writes --out into an existing folder
    return ["tiny-sft", "--out", str(Path(run.folder) / CHECKPOINT_FOLDER), "--steps", str(run.config["steps"]),
            "--seed", str(run.config["seed"])]


def sft_register(run: Run) -> Checkpoint:
    """The built checkpoint, registered under the run's chosen name as made by this run (no parent: it was trained
    from scratch)."""
    return checkpoint_register(uri=str(Path(run.folder) / CHECKPOINT_FOLDER), name=run.config["name"], run=run,
                               registered_by=run.launched_by)


def sft_progress(run: Run, *, now=None) -> dict:
    """How far a build is, from the last `step N/M` line of its log (tiny-sft logs every tenth of its steps), and
    the minutes left at the pace so far (None before the first logged step past the first)."""
    from django.utils import timezone

    found = STEP_LINE.findall(run.log_tail or "")
    total = int(run.config.get("steps") or 0)
    done = int(found[-1][0]) if found else 0
    minutes_left = None
    if run.started_at and 1 < done < total:
        elapsed = ((now or timezone.now()) - run.started_at).total_seconds()
        minutes_left = max(1, round(elapsed / done * (total - done) / 60))
    return {"step": done, "steps": total, "percent": round(100 * done / total) if total else 0,
            "name": run.config.get("name", DEMO_CHECKPOINT), "run": run, "minutes_left": minutes_left}


def sft_log_metrics(log_tail: str) -> list[dict]:
    """An SFT build's training rows from its log's `step N/M  loss X` lines (it writes no metrics.jsonl), in the
    shape the run page's charts read."""
    return [{"step": int(step), "loss": float(loss)} for step, loss in STEP_LOSS_LINE.findall(log_tail or "")]


def sft_build_estimate(steps: int = DEMO_STEPS) -> dict | None:
    """What a build of `steps` steps takes, from the shipped checkpoint's own build: seconds a step on the processor
    that built it (a busy or slower machine takes up to several times as long). None without a manifest."""
    try:
        built = shipped_manifest()
    except (OSError, ValueError, UserMistake):
        return None
    train_s, recipe_steps = built["built_with"].get("train_s"), built["config"].get("steps")
    if not train_s or not recipe_steps:
        return None
    per_step = train_s / recipe_steps
    return {"seconds_per_step": round(per_step, 1), "minutes": max(1, round(per_step * steps / 60)),
            "steps": steps, "processor": built["built_with"].get("processor", "unknown")}
