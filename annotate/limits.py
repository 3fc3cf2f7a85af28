"""How much a user may send, in one place, and the one reading of a whole number they send.

Every limit is named in the 4xx that enforces it ("rationale is 1,048,576 characters; at most 10,000"),
so the sender knows what to cut. The request body's own byte limits (413, `body_too_large`) are
settings (PAIRWISE_MAX_BODY_BYTES, PAIRWISE_MAX_UPLOAD_BYTES); the others bound what is inside an
accepted body.
"""

from django.conf import settings

from annotate.errors import UserMistake
from training.share_input import NotAShare, read_share

# A reviewer's or adjudicator's rationale: a few paragraphs; a page of text is already far more than one.
MAX_RATIONALE_CHARS = 10_000
# One answer of an import file: a long worked solution or program fits; a book does not. Answers are
# rendered to HTML (Markdown) once per reviewer, so their size bounds that work too.
MAX_RESPONSE_CHARS = 200_000
# All of one prompt's message contents together (a chat with a long system message still fits).
MAX_PROMPT_CHARS = 100_000
# Answers to one prompt: each pair of them becomes a pair to judge (50 answers: 1,225 pairs).
MAX_RESPONSES_PER_PROMPT = 50
# Tags of one prompt, and the characters of each; a gold reason.
MAX_TAGS = 50
MAX_TAG_CHARS = 100
MAX_GOLD_REASON_CHARS = 10_000
# Lines of one import file (blank lines included): past this, split the file.
MAX_IMPORT_LINES = 1_000_000
# A criterion's value in a judgment is one of left/right/tie; a criteria map larger than this is refused
# before anything looks at its keys.
MAX_CRITERIA = 100
# The largest value of an integer column (a criteria version, a count): a bigger number matches nothing
# and is refused rather than sent to the database.
MAX_INT32 = 2**31 - 1
# JSON nested too deep or holding a number too long is refused where it is read: training/json_input.py (the
# DRF parser, the item import and task files all read through it).


def body_too_large(request) -> str | None:
    """The one line refusing a request body over the limit for its kind, by its declared length (before
    anything reads it: Django reads no more than that), or None when it fits. A multipart upload (an
    import file, through the API or a page's form) may be larger than JSON or a plain form."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None  # Django reads such a body as empty
    is_upload = request.META.get("CONTENT_TYPE", "").startswith("multipart/form-data")
    limit = settings.PAIRWISE_MAX_UPLOAD_BYTES if is_upload else settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None or length <= limit:
        return None
    kind, fix = (("a multipart upload", "split the file") if is_upload else
                 ("a request body (JSON or form)", "send less (an import file goes as a multipart upload)"))
    return f"request body too large: {length} bytes, and the limit for {kind} is {limit} bytes; {fix}"


def too_long(name: str, text: str, limit: int) -> str | None:
    """The one line that says `text` is over `limit` characters, or None when it fits."""
    if len(text) <= limit:
        return None
    return f"{name} is {len(text):,} characters; at most {limit:,}"


def unstorable_part(text: str) -> str | None:
    """What in `text` no database text column can hold, or None: a NUL character (PostgreSQL refuses it; a path
    or a command's argument cannot hold one either) or an unpaired surrogate (JSON's \\ud800-\\udfff alone,
    which is no UTF-8)."""
    if "\x00" in text:
        return "a NUL character"
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return "an unpaired surrogate (\\ud800-\\udfff)"
    return None


def text_within(name: str, text: str, limit: int) -> None:
    """The rule for a text a user sends: UserMistake (400) naming the field and both lengths when `text` is over
    `limit` characters, or what it holds that cannot be stored (unstorable_part)."""
    message = too_long(name, text, limit)
    if message:
        raise UserMistake(f"{message}: shorten it")
    if part := unstorable_part(text):
        raise UserMistake(f"{name} contains {part}; remove it")


def whole_number(name: str, value, *, low: int, high: int, error=UserMistake, hint: str = "") -> int:
    """A whole number from JSON (an integer, never true/false) or text of ASCII digits only, low..high.

    Python's int() also reads "²" and "٣" (other scripts' digits) and any size; both are refused here so
    that what a user sends means one thing and a database column never sees a number it cannot hold.
    """
    span = f"a whole number from {low} to {high}" + (f" ({hint})" if hint else "")
    shown = repr(value) if len(repr(value)) <= 42 else f"{repr(value)[:40]}... ({len(str(value))} characters)"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise error(f"{name}: {shown} must be {span}")
    number = value
    if isinstance(value, str):
        digits = value.strip()
        body = digits[1:] if digits[:1] == "-" else digits
        if not (body.isascii() and body.isdigit()) or len(body) > 20:
            raise error(f"{name}: {shown} must be {span}, written in the digits 0-9")
        number = int(digits)
    if not low <= number <= high:
        raise error(f"{name}: {shown} must be {span}")
    return number


def share_number(name: str, value, *, low: float = 0.0, high: float = 1.0, error=UserMistake, hint: str = "") -> float:
    """A number from low to high (a share, a rate, a pass mark) from JSON or a form's text: never true/false, NaN
    or an infinity. The one rule (training.share_input.read_share) for every such setting and filter, in the
    app's one message."""
    try:
        return read_share(value, low=low, high=high)
    except NotAShare as refused:
        span = f"a number from {low:g} to {high:g}" + (f" ({hint})" if hint else "")
        shown = repr(refused.number) if refused.number is not None else repr(value)
        shown = shown if len(shown) <= 42 else f"{shown[:40]}... ({len(str(value))} characters)"
        raise error(f"{name}: {shown} must be {span}") from None


TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off", "")  # "" is an unticked box or an empty form field


def true_or_false(name: str, value, *, error=UserMistake) -> bool:
    """A switch from JSON (true/false) or a form's or command line's text (true/1/yes/on, false/0/no/off or
    empty, any case); anything else is refused in one line naming the field."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in TRUE_WORDS + FALSE_WORDS:
        return value.lower() in TRUE_WORDS
    raise error(f"{name}: {value!r} must be true or false")

