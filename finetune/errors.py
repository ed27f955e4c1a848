"""Typed errors of `finetune/`: the user's to fix (bad data line, impossible option), printed as one line."""

from __future__ import annotations


class FinetuneError(ValueError):
    """A fine-tuning input or option is wrong; the message names the file/line or key and the fix."""


class FinetuneDataError(FinetuneError):
    """A data file is missing, malformed, or yields no usable examples for the chosen method."""
