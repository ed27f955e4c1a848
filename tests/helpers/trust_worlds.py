"""Scripted worlds of the trust tests: a harmful lesson for the gate, and a model x library matrix."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from experiences import Library
from tests.helpers.learn_world import World, write_problems
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client

HARMFUL = "adding 30 and 41"  # a lesson that makes every validation answer wrong
VAL = [(1, 2), (3, 4), (5, 6), (7, 8), (11, 12), (13, 14)]  # "mixed": half the samples right without harm


def harmful_world() -> World:
    world = World()
    respond = world.respond

    def responder(request, index):
        system = next((m.content for m in request.messages if m.role == "system"), "") or ""
        if request.tag == "validation" and HARMFUL in system:
            return "Adding gives \\boxed{0}"
        return respond(request, index)

    world.responder = responder
    return world


def run_learn(tmp_path: Path, **settings):
    data = write_problems(tmp_path / "train.jsonl", [(17, 25), (30, 41)])
    val = write_problems(tmp_path / "val.jsonl", VAL)
    config = LearnConfig(
        data=str(data),
        val_data=str(val),
        out=str(tmp_path / "run"),
        dedup=False,
        llm={"max_retries": 0},
        group_size=2,
        epochs=1,
        batch_size=1,
        val_samples=4,
        **settings,
    )
    world = harmful_world()
    client = build_client(
        config.llm, backends=[ScriptedBackend(world.responder)], cache_path=Path(config.out) / "cache.sqlite"
    )
    return learn(config, client=client, console=Console(file=io.StringIO(), width=300))


LESSON = "Carry the tens digit."


def responder_for(model: str):
    def respond(request, index):
        """alpha uses the lesson (always right with it, half without); beta ignores it (half right)."""
        system = next((m.content for m in request.messages if m.role == "system"), "") or ""
        a, b = (int(x) for x in re.search(r"What is (\d+)\+(\d+)", request.messages[-1].content).groups())
        right = index % 2 == 0 or (model == "alpha" and LESSON in system)
        return f"\\boxed{{{a + b if right else -1}}}"

    return respond


def make_matrix(tmp_path: Path) -> dict:
    data = tmp_path / "val.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"v{i}", "problem": f"What is {i}+{i + 3}?", "answer": str(2 * i + 3)}) + "\n"
            for i in range(10)
        )
    )
    library = tmp_path / "alpha-lib.json"
    Library.from_texts([LESSON]).save(library)
    return {
        "out": str(tmp_path / "matrix"),
        "eval": {"data": str(data), "samples": 4},
        "models": [
            {"name": m, "llm": {"backend": "openai", "model": m, "base_url": ["http://127.0.0.1:9/v1"]}}
            for m in ("alpha", "beta")
        ],
        "libraries": [{"name": "none", "library": None}, {"name": "alpha-lib", "library": str(library)}],
    }
