"""Multiple choice: the chosen option, by letter or by the option's text, against the reference option."""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Any

from tfgrpo.rewards.base import Reward, Score, column, completion_text
from tfgrpo.rewards.exact import exact_match_form
from tfgrpo.rewards.extraction import last_answer_line, last_boxed

# "(B)", "B)", "B.", "**B**", "option B", "answer is B": a capital letter standing alone.
_LETTER = re.compile(r"(?<![A-Za-z0-9])\(?([A-Z])\)?(?![A-Za-z0-9])")
_STATED = re.compile(r"(?:answer|option|choice)\s*(?:is|:)?\s*\**\(?([A-Z])\)?(?![A-Za-z0-9])", re.IGNORECASE)


def _letters(count: int) -> str:
    return string.ascii_uppercase[:count]


def choose(text: str, options: Sequence[str] | None = None, letters: str = "ABCDEFGHIJ") -> str | None:
    """The option letter a completion picks, or None. Boxed / answer line first, then the last lone letter."""
    for candidate in (last_boxed(text), last_answer_line(text)):
        if candidate:
            picked = _letter_or_option(candidate, options, letters)
            if picked:
                return picked
    stated = [m.group(1).upper() for m in _STATED.finditer(text) if m.group(1).upper() in letters]
    if stated:
        return stated[-1]
    lone = [m.group(1) for m in _LETTER.finditer(text) if m.group(1) in letters]
    return lone[-1] if lone else None


def _letter_or_option(candidate: str, options: Sequence[str] | None, letters: str) -> str | None:
    if options:
        wanted = exact_match_form(candidate)
        for index, option in enumerate(options):
            if exact_match_form(str(option)) == wanted:
                return letters[index]
    found = [m.group(1) for m in _LETTER.finditer(candidate.upper() if len(candidate) <= 3 else candidate)]
    found = [letter for letter in found if letter in letters]
    return found[0] if len(found) == 1 else None


def gold_letter(gold: Any, options: Sequence[str] | None, letters: str) -> str | None:
    """The reference as a letter: a letter, an index (0-based int), or the text of one of the options."""
    if gold is None:
        return None
    if isinstance(gold, int) and not isinstance(gold, bool):
        return letters[gold] if 0 <= gold < len(letters) else None
    text = str(gold).strip()
    if len(text) == 1 and text.upper() in letters:
        return text.upper()
    return _letter_or_option(text, options, letters)


class ChoiceReward(Reward):
    """1.0 when the completion picks the reference option.

    Args:
        answer_key: column with the reference (a letter, a 0-based index, or the option's text).
        options_key: column with the list of options (optional; lets answers name an option by its text).
    """

    name = "choice"

    def __init__(self, answer_key: str = "answer", *, options_key: str = "choices") -> None:
        super().__init__()
        self.answer_key = answer_key
        self.options_key = options_key

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        golds = column(columns, self.answer_key, len(completions), reward_name=self.name)
        if columns.get(self.options_key) is not None:
            options_per_row = column(columns, self.options_key, len(completions), reward_name=self.name)
        else:
            options_per_row = [None] * len(completions)
        scores = []
        for completion, gold, options in zip(completions, golds, options_per_row, strict=True):
            letters = _letters(len(options)) if options else "ABCDEFGHIJ"
            expected = gold_letter(gold, options, letters)
            picked = choose(completion_text(completion), options, letters)
            if expected is None:
                scores.append(Score(None, picked, f"reference {gold!r} is not one of the options {letters}"))
            elif picked is None:
                scores.append(Score(0.0, None, "no option chosen"))
            elif picked == expected:
                scores.append(Score(1.0, picked, f"correct: chose {picked}"))
            else:
                scores.append(Score(0.0, picked, f"wrong: chose {picked}, the answer is {expected}"))
        return scores


__all__ = ["ChoiceReward", "choose", "gold_letter"]
