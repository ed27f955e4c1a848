"""Errors of the eval package that a user can act on (unknown dataset, bad rows, mismatched runs)."""


class EvalError(ValueError):
    """Base class; the message says what is wrong and where."""


class DatasetError(EvalError):
    """A dataset name is unknown, or a row of a dataset file is malformed (the message names file, line, key)."""


class RunDirError(EvalError):
    """An eval or learn run directory is missing files, holds malformed ones, or cannot be compared."""
