"""Errors of the experiences package that a user can act on (bad library file, unknown version)."""


class ExperienceError(ValueError):
    """Base class; the message says what is wrong and where."""
