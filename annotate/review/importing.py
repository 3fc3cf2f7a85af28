"""Reading an import file (JSONL, one prompt a line) into checked items, or every error in it.

Pure: no database. A file with any error is rejected whole, so the caller stores nothing from it.
`items_read` streams: it yields each good item as its line is read and keeps none, so a file of any
size is read in flat memory. A repeated prompt_id can only be seen with every id read so far at hand:
`items_parse` (a small file in memory) keeps them in a dict, the import (annotate/review/import_sql.py)
finds them in its staging table.
"""

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from annotate.limits import (
    MAX_GOLD_REASON_CHARS,
    MAX_IMPORT_LINES,
    MAX_PROMPT_CHARS,
    MAX_RESPONSE_CHARS,
    MAX_RESPONSES_PER_PROMPT,
    MAX_TAG_CHARS,
    MAX_TAGS,
    too_long,
    unstorable_part,
)
from training.json_input import JsonRefused, read_json_line
from training.snapshot import prompt_key

ROLES = {"system", "user", "assistant"}
MAX_ERRORS = 200  # past this many, the rest of the file is not worth listing
MAX_NAME_CHARS = 200  # prompt_id, model and model_version columns
# JSON escapes of what no database column can hold as text: NUL (PostgreSQL refuses it) and a UTF-16
# surrogate without its pair (not a character at all). Only a line with one of these is searched further.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


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
    gold_reason: str = ""

    @property
    def prompt_key(self) -> str:
        """Which prompts are "the same prompt": the messages' key (training.snapshot.prompt_key)."""
        return prompt_key(self.messages)


class ImportRejected(ValueError):
    """The file is rejected whole; `errors` holds every problem as 'line N: reason'."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__(f"import rejected, {len(errors)} error(s): " + "; ".join(errors[:5]))


def _messages(value, where: str, errors: list[str]) -> list[dict]:
    if isinstance(value, str):
        if not value.strip():
            errors.append(f"{where}: 'prompt' is empty")
        _prompt_within_limit(value, where, errors)
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and value:
        for i, message in enumerate(value):
            if not (isinstance(message, dict) and set(message) <= {"role", "content"}):
                errors.append(f"{where}: prompt message {i} must be {{'role': ..., 'content': ...}}")
            elif message.get("role") not in ROLES:
                errors.append(f"{where}: prompt message {i} has role {message.get('role')!r}; use one of {sorted(ROLES)}")
            elif not isinstance(message.get("content"), str):
                errors.append(f"{where}: prompt message {i} needs a 'content' string")
            elif not message["content"].strip():
                errors.append(f"{where}: prompt message {i} ({message['role']}) has empty 'content'; write the "
                              "message or leave it out")
        if all(isinstance(message, dict) and isinstance(message.get("content"), str) for message in value):
            _prompt_within_limit("".join(message["content"] for message in value), where, errors)
        return value
    errors.append(f"{where}: 'prompt' must be a string or a non-empty list of chat messages")
    return []


def _prompt_within_limit(text: str, where: str, errors: list[str]) -> None:
    message = too_long("the prompt", text, MAX_PROMPT_CHARS)
    if message:
        errors.append(f"{where}: {message} (all messages together)")


def _responses(value, where: str, errors: list[str]) -> list[ImportedResponse]:
    if not isinstance(value, list) or len(value) < 2:
        errors.append(f"{where}: 'responses' must be a list of at least two answers")
        return []
    if len(value) > MAX_RESPONSES_PER_PROMPT:
        errors.append(f"{where}: {len(value)} responses; at most {MAX_RESPONSES_PER_PROMPT} to one prompt "
                      "(each two of them make a pair to judge)")
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
        elif too_long("its text", text, MAX_RESPONSE_CHARS):
            errors.append(f"{where}: response {i}: {too_long('its text', text, MAX_RESPONSE_CHARS)}")
        elif not isinstance(model, str) or not model.strip():
            errors.append(f"{where}: response {i} needs a 'model' name")
        elif len(model.strip()) > MAX_NAME_CHARS:
            errors.append(f"{where}: response {i} 'model' is longer than {MAX_NAME_CHARS} characters")
        elif not isinstance(version, str | int):
            errors.append(f"{where}: response {i} 'model_version' must be a string")
        elif len(str(version).strip()) > MAX_NAME_CHARS:
            errors.append(f"{where}: response {i} 'model_version' is longer than {MAX_NAME_CHARS} characters")
        else:
            responses.append(ImportedResponse(text=text, model=model.strip(), model_version=str(version).strip()))
    if len(responses) == len(value) and len({response.text.strip() for response in responses}) == 1:
        errors.append(f"{where}: all answers are identical; nothing to compare")
        return []
    return responses


def _item(line_no: int, raw: str, errors: list[str]) -> ImportedItem | None:
    where = f"line {line_no}"
    try:
        row = read_json_line(raw)
    except JsonRefused as refused:
        errors.append(f"{where}: {refused.reason}")
        return None
    if not isinstance(row, dict):
        errors.append(f"{where}: must be a JSON object")
        return None
    if _SUSPECT_ESCAPE.search(raw) and _unstorable(row):
        errors.append(f"{where}: holds \\u0000 or an unpaired surrogate (\\ud800-\\udfff), which is not text that "
                      "can be stored; remove it")
        return None
    before = len(errors)
    unknown = set(row) - {"prompt_id", "prompt", "responses", "tags", "gold"}
    if unknown:
        errors.append(f"{where}: unknown key(s) {sorted(unknown)}")
    prompt_id = row.get("prompt_id")
    if not isinstance(prompt_id, str | int) or not str(prompt_id).strip():
        errors.append(f"{where}: 'prompt_id' is missing")
    elif len(str(prompt_id)) > MAX_NAME_CHARS:
        errors.append(f"{where}: 'prompt_id' is longer than {MAX_NAME_CHARS} characters")
    messages = _messages(row.get("prompt"), where, errors)
    responses = _responses(row.get("responses"), where, errors)
    tags = row.get("tags", [])
    if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        errors.append(f"{where}: 'tags' must be a list of strings")
        tags = []
    elif len(tags) > MAX_TAGS or any(len(tag) > MAX_TAG_CHARS for tag in tags):
        errors.append(f"{where}: 'tags' may hold at most {MAX_TAGS} tags of at most {MAX_TAG_CHARS} characters each")
        tags = []
    gold_preferred, gold_reason = None, ""
    if "gold" in row:
        gold = row["gold"]
        preferred = gold.get("preferred") if isinstance(gold, dict) else None
        reason = gold.get("reason", "") if isinstance(gold, dict) else ""
        if not isinstance(preferred, int) or isinstance(preferred, bool):
            errors.append(f"{where}: 'gold' must be {{\"preferred\": <response index>, \"reason\": \"...\" (optional)}}")
        elif set(gold) - {"preferred", "reason"}:
            errors.append(f"{where}: gold has unknown key(s) {sorted(set(gold) - {'preferred', 'reason'})}; "
                          "use preferred and reason")
        elif not 0 <= preferred < len(row.get("responses") or []):
            errors.append(f"{where}: gold.preferred={preferred} is not the index of a response")
        elif not isinstance(reason, str):
            errors.append(f"{where}: gold.reason must be a string (why the preferred answer is better)")
        elif too_long("gold.reason", reason, MAX_GOLD_REASON_CHARS):
            errors.append(f"{where}: {too_long('gold.reason', reason, MAX_GOLD_REASON_CHARS)}")
        else:
            gold_preferred, gold_reason = preferred, reason.strip()
    if len(errors) > before:
        return None
    return ImportedItem(
        line=line_no, prompt_id=str(prompt_id).strip(), messages=messages, responses=responses,
        tags=tags, gold_preferred=gold_preferred, gold_reason=gold_reason,
    )


def _unstorable(value) -> bool:
    if isinstance(value, str):
        return unstorable_part(value) is not None
    if isinstance(value, list):
        return any(_unstorable(item) for item in value)
    if isinstance(value, dict):
        return any(_unstorable(key) or _unstorable(item) for key, item in value.items())
    return False


def items_read(lines: Iterable[str | bytes], errors: list[tuple[int, str]]) -> Iterator[ImportedItem]:
    """Each good item of an import file as its line is read; every problem goes to `errors` as
    (line number, 'line N: reason'). Stops reading after MAX_ERRORS problems.

    Does not look for repeated prompt_ids (see the module's docstring); `errors_in_order` merges the
    caller's findings with these.
    """
    found = 0
    for line_no, raw in enumerate(lines, start=1):
        line_errors: list[str] = []
        if line_no > MAX_IMPORT_LINES:
            errors.append((line_no, f"line {line_no}: the file has more than {MAX_IMPORT_LINES:,} lines; "
                                    "split it and import the parts one after another"))
            return
        if isinstance(raw, bytes):
            try:
                # utf-8-sig on the first line: a byte order mark that an editor put there is not part of the JSON
                raw = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                line_errors.append(f"line {line_no}: not UTF-8 text (byte {exc.start + 1} of the line is "
                                   f"0x{exc.object[exc.start]:02x}); save the file as UTF-8")
        elif line_no == 1:
            raw = raw.removeprefix("\ufeff")
        if not line_errors:
            if not raw.strip():
                continue
            item = _item(line_no, raw, line_errors)
            if item is not None:
                yield item
        if line_errors:
            errors.extend((line_no, error) for error in line_errors)
            found += len(line_errors)
            if found >= MAX_ERRORS:
                return


def errors_in_order(found: Iterable[tuple[int, str]]) -> list[str]:
    """Problems found by line, as a file's errors are listed: in line order, a line's own in the order found,
    cut after the line that brings the count to MAX_ERRORS."""
    errors: list[str] = []
    last_line = None
    for line, error in sorted(found, key=lambda problem: problem[0]):  # stable: a line's errors keep their order
        if line != last_line and len(errors) >= MAX_ERRORS:
            break
        errors.append(error)
        last_line = line
    if len(errors) >= MAX_ERRORS:
        errors.append(f"line {last_line}: stopped after {MAX_ERRORS} errors")
    return errors


def items_parse(lines: Iterable[str | bytes]) -> list[ImportedItem]:
    """Every item of an import file, or ImportRejected with every error as 'line N: reason'.

    Holds the whole file: for tests and small files. The import reads files with `items_read`.
    """
    found: list[tuple[int, str]] = []
    items: list[ImportedItem] = []
    first_line_of: dict[str, int] = {}
    for item in items_read(lines, found):
        if item.prompt_id in first_line_of:
            found.append((item.line, f"line {item.line}: prompt_id {item.prompt_id!r} already appears on line "
                                     f"{first_line_of[item.prompt_id]}"))
        else:
            first_line_of[item.prompt_id] = item.line
            items.append(item)
    errors = errors_in_order(found)
    if not items and not errors:
        errors.append("line 1: the file has no items")
    if errors:
        raise ImportRejected(errors)
    return items
