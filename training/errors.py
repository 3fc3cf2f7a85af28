"""The one error type for input a user can fix.

`python -m training ...` prints such an error as a single line on stderr and exits with code 2, with no
traceback: the message itself must say what is wrong, where, and how to fix it.
"""


class PairwiseInputError(ValueError):
    """Bad input a user can fix (a path, a config key, a file's contents). Not a bug in Pairwise."""
