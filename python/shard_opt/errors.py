"""Error types. A ``UserError`` ends the CLI with one line on stderr and exit 1."""


class ShardOptError(Exception):
    """Base class of shard-opt's own errors."""


class UserError(ShardOptError):
    """Bad input: what went wrong, where, and what to do, in one line."""


class PassError(ShardOptError):
    """A pass failed on a module; ``repro_path`` holds the IR that reproduces it."""

    def __init__(self, message: str, repro_path: str | None = None):
        super().__init__(message)
        self.repro_path = repro_path
