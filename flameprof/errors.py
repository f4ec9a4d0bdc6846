"""User-facing errors: the CLI prints these as one line and exits non-zero, never with a traceback."""


class FlameprofError(Exception):
    """A problem with the user's input or environment, reported as ``flameprof: error: <message>``."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class InjectUnavailable(FlameprofError):
    """``attach`` cannot inject into this process; the caller may fall back to py-spy."""
