"""Scripted worlds of the trust tests: a harmful lesson for the gate, and a model x library matrix."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from tests.helpers.learn_world import World, write_problems
from tfgrpo.core.metrics import summarize
from tfgrpo.eval.compare import compare_runs
from tfgrpo.eval.matrix import MatrixConfig, run_matrix
from tfgrpo.experiences import Library
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


def gated_learn_report(tmp_path: Path) -> tuple[dict, dict[str, Path]]:
    """A gated learn run (one step kept, one rejected) compared with a small eval run: the report's
    Pareto view and gate summary. Returns `compare_runs`' (comparison, files)."""
    run_learn(tmp_path, gate=True)
    rows = [
        {
            "problem_id": f"p{i}",
            "sample": s,
            "reward": float((i + s) % 2),
            "extracted": "1",
            "gold": "1",
            "error": None,
        }
        for i in range(4)
        for s in range(2)
    ]
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (eval_dir / "metrics.json").write_text(json.dumps({**summarize(rows, n_bootstrap=200), "provenance": {}}))
    return compare_runs([eval_dir], tmp_path / "report", learn_run=tmp_path / "run")


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


def run_scripted_matrix(tmp_path: Path) -> list:
    """`make_matrix`'s models x libraries evaluated against `responder_for` each model (no server)."""
    config = MatrixConfig.model_validate(make_matrix(tmp_path))

    def client_for(cell):
        return build_client(
            cell.llm,
            backends=[ScriptedBackend(responder_for(cell.llm.model))],
            cache_path=Path(cell.out) / "cache.sqlite",
        )

    return run_matrix(config, client_for=client_for, console=Console(file=io.StringIO()))
