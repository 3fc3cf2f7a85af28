"""A share a user gives (a rate, a ratio, a pass mark): the one rule for a number between two bounds.

The training command (tiny-sft's --misconception-share) and the web app (annotate.limits.share_number: export
filters, quality settings, task sets) both read shares through `read_share`; each says in its own words what was
refused.
"""


class NotAShare(ValueError):
    """A value `read_share` refuses; `number` is what it read as (None when it is no number at all)."""

    def __init__(self, number: float | None):
        super().__init__(number)
        self.number = number


def read_share(value, *, low: float = 0.0, high: float = 1.0) -> float:
    """`value` (a JSON number, a form's or command line's text, a float) as a number from `low` to `high`, both
    included; raises NotAShare for true/false, NaN, an infinity, text that is no number, or a number outside."""
    number = None
    if not isinstance(value, bool) and isinstance(value, int | float | str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not low <= number <= high:  # the comparison also refuses NaN
        raise NotAShare(number)
    return number
