"""The review workflow's one error: a mistake the user can fix, with an HTTP-like status."""

from annotate.errors import UserMistake


class ReviewError(UserMistake):
    """A review mistake the user can fix."""
