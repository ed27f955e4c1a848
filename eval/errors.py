"""Errors of the eval package that a user can act on (unknown dataset, bad rows, mismatched runs)."""


class EvalError(ValueError):
    """Base class; the message says what is wrong and where."""
