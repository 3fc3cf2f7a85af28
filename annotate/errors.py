"""The one kind of error a user can fix, shared by every part of the app."""


class UserMistake(Exception):
    """A mistake the user can fix; `status` is the HTTP status the API answers with.

    The API turns it into `{"detail": "<message>"}` (annotate.api_errors); commands print the message.
    """

    status = 400

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status
