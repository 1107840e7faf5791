"""The one exception users see: a clear, one-line message about their input."""

from __future__ import annotations


class WxstatsError(Exception):
    """A problem with the input, the options or the environment.

    The message names the file, variable and problem and says what to do; the
    CLI prints it on one line and exits non-zero, without a traceback.
    """


class InputError(WxstatsError):
    """The data or the configuration is unusable as it is."""


class Interrupted(WxstatsError):
    """SIGINT or SIGTERM stopped the run after it saved its progress.

    ``code`` is the exit status the shell convention gives the signal
    (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def first_line(exc: BaseException) -> str:
    """A library's exception as one phrase, its type and first line, for a one-line error."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
