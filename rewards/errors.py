"""Errors of the rewards package that a user can act on (unknown reward, bad input file)."""


class RewardError(ValueError):
    """Base class; the message says what is wrong and where."""
