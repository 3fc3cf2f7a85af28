"""Reading an import file (JSONL, one prompt a line) into checked items, or every error in it.

Pure: no database. A file with any error is rejected whole, so the caller stores nothing from it.
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

ROLES = {"system", "user", "assistant"}
MAX_ERRORS = 200  # past this many, the rest of the file is not worth listing


@dataclass(frozen=True)
class ImportedResponse:
    text: str
    model: str
    model_version: str

    @property
    def text_sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


@dataclass(frozen=True)
class ImportedItem:
    line: int
    prompt_id: str
    messages: list[dict]
    responses: list[ImportedResponse]
    tags: list[str] = field(default_factory=list)
    gold_preferred: int | None = None


class ImportRejected(ValueError):
    """The file is rejected whole; `errors` holds every problem as 'line N: reason'."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__(f"import rejected, {len(errors)} error(s): " + "; ".join(errors[:5]))


def _messages(value, where: str, errors: list[str]) -> list[dict]:
    if isinstance(value, str):
        if not value.strip():
            errors.append(f"{where}: 'prompt' is empty")
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value:
        for i, message in enumerate(value):
            if not (isinstance(message, dict) and set(message) <= {"role", "content"}):
                errors.append(f"{where}: prompt message {i} must be {{'role': ..., 'content': ...}}")
            elif message.get("role") not in ROLES:
                errors.append(f"{where}: prompt message {i} has role {message.get('role')!r}; use one of {sorted(ROLES)}")
            elif not isinstance(message.get("content"), str):
                errors.append(f"{where}: prompt message {i} needs a 'content' string")
        return value
    errors.append(f"{where}: 'prompt' must be a string or a non-empty list of chat messages")
    return []


def _responses(value, where: str, errors: list[str]) -> list[ImportedResponse]:
    if not isinstance(value, list) or len(value) < 2:
        errors.append(f"{where}: 'responses' must be a list of at least two answers")
        return []
    responses = []
    for i, response in enumerate(value):
        if not isinstance(response, dict):
            errors.append(f"{where}: response {i} must be an object with 'text' and 'model'")
            continue
        unknown = set(response) - {"text", "model", "model_version"}
        if unknown:
            errors.append(f"{where}: response {i} has unknown key(s) {sorted(unknown)}")
        text, model = response.get("text"), response.get("model")
        version = response.get("model_version", "")
        if not isinstance(text, str) or not text.strip():
            errors.append(f"{where}: response {i} needs a non-empty 'text'")
        elif not isinstance(model, str) or not model.strip():
            errors.append(f"{where}: response {i} needs a 'model' name")
        elif not isinstance(version, str | int):
            errors.append(f"{where}: response {i} 'model_version' must be a string")
        else:
            responses.append(ImportedResponse(text=text, model=model.strip(), model_version=str(version).strip()))
    return responses


def _item(line_no: int, raw: str, errors: list[str]) -> ImportedItem | None:
    where = f"line {line_no}"
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as exc:
        errors.append(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})")
        return None
    if not isinstance(row, dict):
        errors.append(f"{where}: must be a JSON object")
        return None
    before = len(errors)
    unknown = set(row) - {"prompt_id", "prompt", "responses", "tags", "gold"}
    if unknown:
        errors.append(f"{where}: unknown key(s) {sorted(unknown)}")
    prompt_id = row.get("prompt_id")
    if not isinstance(prompt_id, str | int) or not str(prompt_id).strip():
        errors.append(f"{where}: 'prompt_id' is missing")
    elif len(str(prompt_id)) > 200:
        errors.append(f"{where}: 'prompt_id' is longer than 200 characters")
    messages = _messages(row.get("prompt"), where, errors)
    responses = _responses(row.get("responses"), where, errors)
    tags = row.get("tags", [])
    if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        errors.append(f"{where}: 'tags' must be a list of strings")
        tags = []
    gold_preferred = None
    if "gold" in row:
        gold = row["gold"]
        preferred = gold.get("preferred") if isinstance(gold, dict) else None
        if not isinstance(preferred, int) or isinstance(preferred, bool):
            errors.append(f"{where}: 'gold' must be {{\"preferred\": <response index>}}")
        elif not 0 <= preferred < len(row.get("responses") or []):
            errors.append(f"{where}: gold.preferred={preferred} is not the index of a response")
        else:
            gold_preferred = preferred
    if len(errors) > before:
        return None
    return ImportedItem(
        line=line_no, prompt_id=str(prompt_id).strip(), messages=messages, responses=responses,
        tags=tags, gold_preferred=gold_preferred,
    )


def items_parse(lines: Iterable[str | bytes]) -> list[ImportedItem]:
    """Every item of an import file, or ImportRejected with every error as 'line N: reason'."""
    errors: list[str] = []
    items: list[ImportedItem] = []
    first_line_of: dict[str, int] = {}
    for line_no, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError:
                errors.append(f"line {line_no}: not UTF-8 text")
                continue
        if not raw.strip():
            continue
        item = _item(line_no, raw, errors)
        if item is not None:
            if item.prompt_id in first_line_of:
                errors.append(
                    f"line {line_no}: prompt_id {item.prompt_id!r} already appears on line {first_line_of[item.prompt_id]}"
                )
            else:
                first_line_of[item.prompt_id] = line_no
                items.append(item)
        if len(errors) >= MAX_ERRORS:
            errors.append(f"line {line_no}: stopped after {MAX_ERRORS} errors")
            break
    if not items and not errors:
        errors.append("line 1: the file has no items")
    if errors:
        raise ImportRejected(errors)
    return items
