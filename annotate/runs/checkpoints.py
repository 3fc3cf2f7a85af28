"""Registering checkpoints: a local folder (hashed by content) or a URI, with its parent.

A local checkpoint is known by its content hash (training.run_folder.checkpoint_content_hash), so the same
weights registered twice, under any path or URI, are one checkpoint. A trained checkpoint's parent.json names
its parent by hash; the parent is linked when it is registered. A checkpoint's origin (its parent, the run that
made it) is written when it is registered and never changed afterwards.

A name, wherever a checkpoint gets one (registered, renamed, made by a run, the demo's), passes one rule
(`checked_name`) and is unique under its look-alike key (training.text_input.name_key, unique in the database too).
"""

import logging
from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from annotate.errors import UserMistake
from annotate.limits import text_within
from annotate.runs.models import Checkpoint, Run
from training.errors import PairwiseInputError
from training.grpo.versions import KEEP_FILE, VERSION_NAME
from training.json_input import read_json_file
from training.run_folder import checkpoint_content_hash
from training.text_input import hidden_character, name_key, without_hidden

logger = logging.getLogger(__name__)

NAME_MAX_LENGTH = Checkpoint._meta.get_field("name").max_length
KEY_MAX_LENGTH = Checkpoint._meta.get_field("name_key").max_length


def checkpoint_resolve(reference, *, key: str = "base_checkpoint") -> Checkpoint:
    """A registered checkpoint by id or name, or one line saying which exist."""
    text = str(reference).strip() if reference is not None else ""
    found = None
    if text.isdigit():
        found = Checkpoint.objects.filter(pk=int(text)).first()
    if found is None and text:
        found = Checkpoint.objects.filter(name=text).first()
    if found is None:
        names = list(Checkpoint.objects.order_by("name").values_list("name", flat=True)[:10])
        known = f"registered: {', '.join(names)}" if names else "none is registered yet"
        raise UserMistake(f"{key} {text or '(empty)'!r} is not a registered checkpoint ({known}); register it with "
                          "manage.py register_checkpoint PATH")
    return found


def is_reward_model(checkpoint: Checkpoint) -> bool:
    """Whether a checkpoint is a reward model (a one-output sequence classifier), not a causal LM that writes text:
    made by a run of kind reward, or a folder whose config.json names an architecture ending in
    ForSequenceClassification (as `python -m training reward` saves one). A URI not read here is neither known nor
    assumed to be one."""
    if checkpoint.run_id and checkpoint.run.kind == Run.Kind.REWARD:
        return True
    architectures = (read_json_file(Path(checkpoint.uri) / "config.json") or {}).get("architectures")
    return isinstance(architectures, list) and any(
        isinstance(name, str) and name.endswith("ForSequenceClassification") for name in architectures)


def registered_reward_model(content_hash: str) -> Checkpoint | None:
    """The first registered reward model with these weights (a causal LM registered with the same hash is not one)."""
    candidates = Checkpoint.objects.filter(content_hash=content_hash).select_related("run").order_by("id")
    return next((checkpoint for checkpoint in candidates if is_reward_model(checkpoint)), None)


def text_model(checkpoint: Checkpoint, *, key: str, purpose: str) -> Checkpoint:
    """The checkpoint itself, unless it is a reward model, which scores answers but writes none: one line then."""
    if is_reward_model(checkpoint):
        raise UserMistake(f"{key} {checkpoint.name!r} is a reward model (a sequence classifier that scores answers), "
                          f"not a model that writes text, so it cannot {purpose}; pick a causal LM such as the one it "
                          "was trained from")
    return checkpoint


def reward_model_resolve(reference) -> Checkpoint:
    """A registered reward-model checkpoint by id or name, in a local folder, for a GRPO run to be scored by."""
    checkpoint = checkpoint_resolve(reference, key="reward_model")
    if not is_reward_model(checkpoint):
        raise UserMistake(f"reward_model {checkpoint.name!r} is not a reward model (its config.json names no "
                          "...ForSequenceClassification architecture and no reward run made it); train one with a "
                          "reward run on a snapshot and pick its checkpoint")
    if not Path(checkpoint.uri).is_dir():
        raise UserMistake(f"reward_model {checkpoint.name!r} lies at {checkpoint.uri}, which is not a folder here; a "
                          "run loads its reward model from a local checkpoint folder")
    return checkpoint


def checkpoints_by_role() -> tuple[list[Checkpoint], list[Checkpoint]]:
    """(text models, reward models) by name, in one pass (each checkpoint's config.json read once): the first a run
    may start from, evaluate or sample answers with; the second a GRPO run may be scored by."""
    text_models, reward_models = [], []
    for checkpoint in Checkpoint.objects.select_related("run").order_by("name"):
        (reward_models if is_reward_model(checkpoint) else text_models).append(checkpoint)
    return text_models, reward_models


def unique_name(wanted: str) -> str:
    """`wanted` made a name the rule takes (no '=', no hidden character) that no checkpoint has, nor one like it."""
    wanted = without_hidden(wanted.replace("=", "-")).strip()  # a name is written NAME=PATH on the sample command line
    name, number = wanted[:190] or "checkpoint", 2
    while name.isdigit() or Checkpoint.objects.filter(name_key=name_key(name)).exists():
        name, number = f"{wanted[:190]}-{number}", number + 1
    return name


def checked_name(name, *, what: str = "checkpoint name", other_than: Checkpoint | None = None) -> str:
    """The one rule for a checkpoint's name, or UserMistake with its one line: not blank, no '=' (compare and evaluate
    pass checkpoints as NAME=PATH), no control or format character (a NUL, a bidi override, a zero-width space) nor
    line separator, not digits only (launches read those as an id), within the column, and no checkpoint (but
    `other_than`) named the same or alike (case and Unicode compatibility forms folded)."""
    new = name.strip() if isinstance(name, str) else ""
    if not new:
        raise UserMistake(f"{what} is blank; give a short name such as tiny-sft-dpo-beta-0.1")
    if hidden := hidden_character(what, new):
        raise UserMistake(hidden)
    if "=" in new:
        raise UserMistake(f"{what} {new[:60]!r} may not contain '=' (compare and evaluate pass checkpoints as "
                          "NAME=PATH); choose another name")
    if new.isdigit():
        raise UserMistake(f"{what} {new!r} is digits only, which launches read as a checkpoint's id; add a letter")
    try:
        new.encode("utf-8")
    except UnicodeEncodeError:
        raise UserMistake(f"{what} holds an unpaired surrogate (\\ud800-\\udfff), which is not text; type the name "
                          "again") from None
    if len(new) > NAME_MAX_LENGTH:
        raise UserMistake(f"{what} is {len(new)} characters long; keep it to {NAME_MAX_LENGTH} or fewer")
    key = name_key(new)
    if len(key) > KEY_MAX_LENGTH:  # compatibility forms can unfold one character into many (U+FDFA into 18)
        raise UserMistake(f"{what} unfolds to {len(key)} characters in its compatibility form (NFKC); keep that to "
                          f"{KEY_MAX_LENGTH} or fewer")
    taken = Checkpoint.objects.filter(name_key=key).exclude(pk=other_than.pk if other_than else None).first()
    if taken is not None:
        alike = "" if taken.name == new else (f" as {taken.name!r}: names that differ only in case or in Unicode's "
                                              "forms of a character are one name")
        raise UserMistake(f"a checkpoint named {new!r} exists already{alike} (checkpoint {taken.pk}); choose another "
                          "name")
    return new


def made_checkpoint_name(run: Run) -> str:
    """What a run's checkpoint is called when it is registered: its base and the run that made it, such as
    `tiny-sft · dpo · run 3` (every run's folder holds a `checkpoint/`, so the folder's name tells nothing).
    The base's name is shortened so that the run always shows; unique_name makes it unique and '='-free."""
    made_by = f"{run.kind} · run {run.pk}"
    return f"{run.base_checkpoint.name[:150]} · {made_by}" if run.base_checkpoint else made_by


def checkpoint_rename(*, checkpoint: Checkpoint, name: str, by: AbstractBaseUser | None = None) -> Checkpoint:
    """Give a checkpoint a new name; its origin (parent, run), content and path stay as they were."""
    new = checked_name(name, other_than=checkpoint)
    if new == checkpoint.name:
        return checkpoint
    old = checkpoint.name
    checkpoint.name = new
    try:
        with transaction.atomic():
            checkpoint.save(update_fields=["name"])
    except IntegrityError:  # taken, or one like it, between the look-up and the save
        checkpoint.name = old
        raise UserMistake(f"a checkpoint named {new!r} or one like it exists already; choose another name") from None
    logger.info("checkpoint %s renamed from %r to %r by %s", checkpoint.pk, old, new,
                by.get_username() if by is not None else "a command")
    return checkpoint


def is_uri(text: str) -> bool:
    return "://" in text


def local_content_hash(folder: Path) -> str:
    try:
        return checkpoint_content_hash(folder)
    except PairwiseInputError as error:
        raise UserMistake(str(error)) from None


def checkpoint_register(*, uri: str, name: str | None = None, parent: Checkpoint | None = None,
                        content_hash: str = "", run: Run | None = None,
                        registered_by: AbstractBaseUser | None = None) -> Checkpoint:
    """Register a checkpoint folder or URI; refuses a name or local content already registered."""
    uri = str(uri).strip()
    if not uri:
        raise UserMistake("give the checkpoint's folder or URI")
    text_within("the checkpoint's folder or URI", uri, Checkpoint._meta.get_field("uri").max_length)
    if is_uri(uri):
        path = None
        if (same := Checkpoint.objects.filter(uri=uri).first()) is not None:
            raise UserMistake(f"{uri} is registered already as checkpoint {same.name!r}")
    else:
        path = Path(uri).resolve()
        if not path.is_dir():
            raise UserMistake(f"{uri} is not a folder; give a local checkpoint folder or a URI such as "
                              "s3://bucket/checkpoint")
        found_hash = local_content_hash(path)
        if content_hash and content_hash != found_hash:
            raise UserMistake(f"{uri} has content hash {found_hash}, not the {content_hash} given; leave --hash out "
                              "for a local folder")
        content_hash, uri = found_hash, str(path)
    same = Checkpoint.objects.select_related("parent").filter(content_hash=content_hash).first() if content_hash \
        else None
    if same is not None:
        kept = ""
        if parent is not None and parent != same.parent:
            kept = (", and a checkpoint's origin is written once: its parent stays "
                    f"{same.parent.name if same.parent else 'none'}")
        raise UserMistake(f"{uri} holds the same weights as checkpoint {same.name!r} ({same.uri}); it is registered "
                          f"already{kept}")
    if path is not None:
        recorded_parent = (read_json_file(path / "parent.json") or {}).get("parent") or {}
        if recorded_parent.get("content_hash") == content_hash:
            raise UserMistake(f"{uri} holds the very weights of its parent {recorded_parent.get('path')} (its "
                              "parent.json says so: the run that wrote it changed no weight); register "
                              f"{recorded_parent.get('path')} itself")
    if name:
        name = checked_name(name)
    if parent is None and path is not None:
        parent = parent_from_folder(path)
    name = name or unique_name(Path(uri.rstrip("/")).name)
    keep = path / KEEP_FILE if path is not None and VERSION_NAME.match(path.name) else None
    if keep is not None:
        # A policy version of a staged cycle: its KEEP file keeps the cycle's retention from removing it. Written
        # before the row, so the cycle's cleanup cannot remove a folder between the row and the file.
        keep.write_text(f"registered in Pairwise as checkpoint {name}\n", encoding="utf-8")
    try:
        return Checkpoint.objects.create(name=name, uri=uri, content_hash=content_hash, parent=parent, run=run,
                                         registered_by=registered_by)
    except BaseException:
        if keep is not None:
            keep.unlink(missing_ok=True)
        raise


def parent_from_folder(path: Path) -> Checkpoint | None:
    """The registered checkpoint a trained checkpoint's parent.json names by content hash, if any."""
    parent_hash = ((read_json_file(path / "parent.json") or {}).get("parent") or {}).get("content_hash")
    return Checkpoint.objects.filter(content_hash=parent_hash).first() if parent_hash else None


def checkpoint_for_folder(path: str, *, content_hash: str | None = None, name: str | None = None,
                          **fields) -> Checkpoint:
    """The checkpoint registered with these weights, or a new one for the folder, called `name` (made unique) or
    after the folder."""
    if not Path(path).is_dir() and content_hash:  # recorded by a run, since moved: known by its hash alone
        return (Checkpoint.objects.filter(content_hash=content_hash).first()
                or Checkpoint.objects.create(name=unique_name(name or Path(path).name), uri=path,
                                             content_hash=content_hash, **fields))
    content_hash = content_hash or local_content_hash(Path(path))
    return (Checkpoint.objects.filter(content_hash=content_hash).first()
            or checkpoint_register(uri=path, content_hash=content_hash, name=unique_name(name) if name else None,
                                   **fields))


WRITES_FOR = {"evaluate": "write the answers an evaluation scores", "compare": "write the answers a comparison samples"}


def local_checkpoints(references: list, *, at_least: int, purpose: str) -> list[Checkpoint]:
    """Registered checkpoints by name or id, distinct and in local folders, for a command that loads them."""
    writes = WRITES_FOR.get(purpose, f"be used to {purpose}")
    chosen = [text_model(checkpoint_resolve(reference, key="checkpoint"), key="checkpoint", purpose=writes)
              for reference in references or []]
    if len({c.pk for c in chosen}) < at_least or len({c.pk for c in chosen}) != len(chosen):
        raise UserMistake(f"choose at least {at_least} different checkpoint{'s' if at_least > 1 else ''} to {purpose}")
    for checkpoint in chosen:
        if not Path(checkpoint.uri).is_dir():
            raise UserMistake(f"checkpoint {checkpoint.name!r} lies at {checkpoint.uri}, not a folder here; "
                              f"to {purpose}, checkpoints must be local folders")
    return chosen
