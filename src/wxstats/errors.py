"""The one exception users see: a clear, one-line message about their input."""

from __future__ import annotations


class WxstatsError(Exception):
    """A problem with the input, the options or the environment.

    The message names the file, variable and problem and says what to do; the
    CLI prints it on one line and exits non-zero, without a traceback.
    """


class InputError(WxstatsError):
    """The data or the configuration is unusable as it is."""
