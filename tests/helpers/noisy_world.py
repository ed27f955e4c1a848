"""A noisy world for `tfgrpo learn`: a model that proposes right and wrong rules with the same confidence.

Problems are "Key K: what is the code?", the code being (37 K + 11) mod 1000. The policy answers right with
probability 0.9 when the true rule is in its prompt and no harmful one is, 0.05 when a harmful one is and the
true rule is not, and 0.3 otherwise (both, or neither: guessing). Stage 2 proposes at random, whatever the
group showed, as a real model may: the true rule, a harmful near-miss (73 for 37: one number), another
(subtract for add: one operator), neutral platitudes, a random specific-sounding tip, a decoding accident, or
a rewrite of the true rule into the harmful one. Stage 3 keeps everything proposed (a faithful consolidator).
Every reply depends only on the request and the sample index (a hash), so a run is deterministic per seed.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRUE_RULE = "To find the code, multiply the key by 37, add 11 and keep the last three digits."
HARMFUL_RULES = (
    "To find the code, multiply the key by 73, add 11 and keep the last three digits.",
    "To find the code, multiply the key by 37, subtract 11 and keep the last three digits.",
)
NEUTRAL_RULES = (
    "Read the problem statement carefully before you start computing.",
    "Write the final answer inside a box at the end of the solution.",
    "When a key is large, double-check each multiplication step.",
)
GIBBERISH = "GZTDXGZGZZZZZZZZ by GZTDXGZZZZZZZZ."
KEY = re.compile(r"Key (\d+): what is the code\?")
LIBRARY_LINE = re.compile(r"^\[(\w+)\]\. (.*)$", re.M)
#: the model's proposals: (share, what); shares add up to 1
PROPOSALS = (
    (0.30, "true"),
    (0.25, "harmful:0"),
    (0.10, "harmful:1"),
    (0.20, "neutral"),
    (0.05, "gibberish"),
    (0.10, "rewrite_true_to_harmful"),
)


def code(key: int) -> int:
    return (37 * key + 11) % 1000


def accuracy_with(system: str) -> float:
    """The policy's chance of a right answer with `system` (the rendered library) in its prompt."""
    true = TRUE_RULE in system
    harmful = any(rule in system for rule in HARMFUL_RULES)
    if true and not harmful:
        return 0.9
    if harmful and not true:
        return 0.05
    return 0.3


def _uniform(*parts: object) -> float:
    digest = hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass
class NoisyWorld:
    seed: int = 0
    calls: list[str] = field(default_factory=list)  # the tag of every request answered
    group_prompts: list[str] = field(default_factory=list)  # stage 2's prompts

    def respond(self, request: Any, index: int) -> str:
        """ScriptedBackend responder."""
        self.calls.append(request.tag)
        messages = [m.model_dump() for m in request.messages]
        first, last = messages[0]["content"] or "", messages[-1]["content"] or ""
        if "<proposed_changes>" in first:
            operations = re.findall(r"^\s+- (\{.*\})$", first, re.M)
            return "Plan: keep all.\n```json\n[" + ", ".join(operations) + "]\n```"
        if "<attempt " in first:
            self.group_prompts.append(first)
            return self.propose(first, index)
        if "<trajectory>" in first:
            return "1. The assistant applied the rule it was given to the key."
        match = KEY.search(last)
        if match is None:
            raise AssertionError(f"unexpected request: {last[:200]}")
        system = first if messages[0]["role"] == "system" else ""
        right = _uniform(self.seed, "rollout", messages, index) < accuracy_with(system)
        key = int(match[1])
        return f"The code is \\boxed{{{code(key) if right else (code(key) + 1) % 1000}}}"

    def propose(self, prompt: str, index: int) -> str:
        draw = _uniform(self.seed, "propose", prompt, index)
        choice = next(what for share, what in _cumulative(PROPOSALS) if draw < share)
        library = dict((text, experience_id) for experience_id, text in LIBRARY_LINE.findall(prompt))
        if choice == "true":
            operation = {"option": "add", "experience": TRUE_RULE}
        elif choice.startswith("harmful:"):
            operation = {"option": "add", "experience": HARMFUL_RULES[int(choice.split(":")[1])]}
        elif choice == "neutral":
            pick = int(_uniform(self.seed, "neutral", prompt) * len(NEUTRAL_RULES))
            operation = {"option": "add", "experience": NEUTRAL_RULES[pick]}
        elif choice == "gibberish":
            operation = {"option": "add", "experience": GIBBERISH}
        elif TRUE_RULE in library:  # the model "corrects" the true rule into a wrong one
            operation = {"option": "modify", "id": library[TRUE_RULE], "experience": HARMFUL_RULES[0]}
        else:
            operation = {"option": "add", "experience": HARMFUL_RULES[0]}
        return json.dumps({"reasoning": "The better attempts followed this rule.", "operations": [operation]})


def _cumulative(shares: tuple[tuple[float, str], ...]) -> list[tuple[float, str]]:
    total, out = 0.0, []
    for share, what in shares:
        total += share
        out.append((total, what))
    out[-1] = (1.0 + 1e-9, out[-1][1])
    return out


def write_keys(path: Path, keys: list[int]) -> Path:
    rows = [{"id": f"k{key}", "problem": f"Key {key}: what is the code?", "answer": str(code(key))} for key in keys]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def run_noisy_learn(tmp_path: Path, seed: int, *, train: int = 20, **settings: Any) -> tuple[Any, NoisyWorld]:
    """`tfgrpo learn` with the defaults (but `settings`) on the noisy world; returns (LearnResult, world)."""
    from rich.console import Console

    from tfgrpo.learn.config import LearnConfig
    from tfgrpo.learn.loop import learn
    from tfgrpo.llm.backends.scripted import ScriptedBackend
    from tfgrpo.llm.factory import build_client

    tmp_path.mkdir(parents=True, exist_ok=True)
    data = write_keys(tmp_path / "train.jsonl", [100 + 7 * i + seed for i in range(train)])
    if settings.get("val_data") == "auto":
        settings["val_data"] = str(write_keys(tmp_path / "val.jsonl", [900 + 3 * i + seed for i in range(40)]))
    config = LearnConfig(data=str(data), out=str(tmp_path / "run"), seed=seed, llm={"max_retries": 0}, **settings)
    world = NoisyWorld(seed=seed)
    client = build_client(config.llm, backends=[ScriptedBackend(world.respond)], cache_path=tmp_path / "cache.sqlite")
    return learn(config, client=client, console=Console(file=io.StringIO(), width=200)), world


def library_holds(library: Any) -> dict[str, bool]:
    texts = [e.text for e in library]
    return {
        "true": TRUE_RULE in texts,
        "harmful": any(rule in texts for rule in HARMFUL_RULES),
        "gibberish": GIBBERISH in texts,
    }


def expected_accuracy(library: Any) -> float:
    """The policy's expected accuracy on unseen keys with `library` in its prompt (exact, not sampled)."""
    from tfgrpo.experiences.render import render

    return accuracy_with(render(library))
