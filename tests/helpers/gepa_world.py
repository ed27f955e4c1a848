"""A scripted world for GEPA: the task model is right only under a prompt that states the rule, and the
reflection model, shown the reward's feedback, proposes that rule.

Task requests ("What is A+B?") are answered A+B when the system prompt contains `RULE`, A+B+1 otherwise;
GEPA's reflection request (its default template, "I provided an assistant with the following instructions")
is answered with the rule in a code block. Everything else is `learn_world.World`'s (learn's stages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.helpers.learn_world import PROBLEM, World

RULE = "Add the two numbers exactly: the carry matters."
REFLECTION_MARK = "I provided an assistant with the following instructions"


@dataclass
class GepaWorld(World):
    reflections: int = 0

    def reply_for(self, messages: list[dict[str, Any]], index: int) -> Any:
        first, text = messages[0]["content"], messages[-1]["content"]
        if REFLECTION_MARK in text:
            self.reflections += 1
            return f"The answers are one too high.\n```\n{RULE}\n```"
        match = PROBLEM.search(text)
        if match is None or len(messages) < 2 or messages[0]["role"] != "system":
            return super().reply_for(messages, index)
        if any(mark in first for mark in ("<proposed_changes>", "<attempt ", "<trajectory>")):
            return super().reply_for(messages, index)
        a, b = int(match[1]), int(match[2])
        return f"Adding gives \\boxed{{{a + b if RULE in first else a + b + 1}}}"


__all__ = ["REFLECTION_MARK", "RULE", "GepaWorld"]
