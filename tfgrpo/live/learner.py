"""`tfgrpo learner`: Training-Free GRPO beside `tfgrpo serve`, on the exchanges its users rewarded.

A loop, in a process of its own:

  read     the rewarded exchanges that came in after the cursor (`intake.py`), on the learner's own
           connection to the trace store; they wait, keyed by prompt, for the next round
  round    once `propose_every` rewarded exchanges wait, or `propose_interval_min` passed with any waiting,
           and only while the deployment has no challenger under test and learning is not paused: one
           `tfgrpo learn` run (`tfgrpo.learn.loop.learn_async`: the engine with its leakage guard, dedup and
           credit) on those prompts, starting from the deployment's champion library
  propose  the round's library, when it differs from the champion it started from and that champion still
           serves, becomes the challenger (`Deployment.propose`); deciding it is the sequential test's job

Serving never waits for the learner: they share no process, and the learner's reads are short
transactions on its own connection (SQLite in WAL mode lets them run beside serve's writes). Its cost is
the client layer's accounting of each round's learn run (`rounds/NNNN/learn/metrics.json` totals, summed in
`state.json`), capped as a whole by `llm.budget_usd`.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.core.datasets import Problem
from tfgrpo.core.lockout import load_test_sets
from tfgrpo.experiences import Library
from tfgrpo.learn.loop import learn_async
from tfgrpo.live.config import LearnerConfig
from tfgrpo.live.intake import PAGE, Cursor, ExchangeReader
from tfgrpo.live.rundir import LearnerRunDir, LearnerState, Round, RoundStatus
from tfgrpo.llm.errors import LLMError
from tfgrpo.serve.deployment import Deployment, DeploymentState, StaleRevision
from tfgrpo.serve.live_library import Snapshot
from tfgrpo.serve.operations import leaked_test_material
from tfgrpo.serve.traces import TraceStore


@dataclass
class LearnerResult:
    status: str  # stopped (--once) | failed (--once, the round's model calls failed) | budget_exceeded | interrupted
    state: LearnerState


class Learner:
    def __init__(self, config: LearnerConfig, *, console: Any | None = None):
        self.config = config
        self.run = LearnerRunDir(config.out)
        self.console = console or Console(stderr=True, soft_wrap=True)
        self.name = self.run.root.name
        self._waiting: str | None = None  # the last reason no round ran, said once

    async def run_async(self) -> LearnerResult:
        """Follow the store until stopped (or, with `once`, for one pass)."""
        store = TraceStore(self.config.traces)  # opened read-side: its writer thread never starts
        try:
            state = self.run.open(self.config)
            deployment = Deployment(store.engine)
            reader = ExchangeReader(
                store.engine,
                ground_truth=self.config.ground_truth,
                rated_threshold=self.config.rated_threshold,
                settle_s=self.config.settle_s,
                test_sets=load_test_sets(self.config.test_data),
            )
            self.say(f"following {self.config.traces} from {self._cursor_text(state)}")
            while True:
                self.read_new(state, reader)
                status = await self.step(state, deployment)
                if status in ("budget_exceeded", "interrupted"):
                    return LearnerResult(status, state)
                if self.config.once:
                    return LearnerResult("failed" if status == "failed" else "stopped", state)
                await asyncio.sleep(self.config.poll_interval_s)
        finally:
            self.run.release()
            store.close()

    # -- read ------------------------------------------------------------------------------------------
    def read_new(self, state: LearnerState, reader: ExchangeReader) -> None:
        """Every settled row after the cursor, page by page; the cursor and the waiting prompts saved together."""
        while True:
            intake = reader.read(Cursor(**state.cursor))
            if not intake.rows:
                return
            for key, problem in intake.problems.items():
                state.pending.pop(key, None)  # the newest answer for a prompt, and its place at the end
                state.pending[key] = problem.model_dump()
            while len(state.pending) > self.config.max_problems:  # the oldest go: a round takes this many at most
                state.pending.pop(next(iter(state.pending)))
                state.dropped += 1
            state.cursor = intake.cursor.__dict__.copy()
            state.read += intake.rows
            state.pending_rewarded += intake.rewarded
            state.skipped += len(intake.skipped)
            state.malformed += sum(entry["kind"] == "malformed" for entry in intake.skipped)
            state.locked_out += sum(entry["kind"] == "locked_out" for entry in intake.skipped)
            self.run.save(state, intake.skipped)
            self.say(
                f"read {intake.rows} rows: {intake.rewarded} rewarded, {len(intake.skipped)} skipped; "
                f"{len(state.pending)} prompts ({state.pending_rewarded} rewarded exchanges) wait"
            )
            if intake.rows < PAGE:
                return

    # -- round -----------------------------------------------------------------------------------------
    async def step(self, state: LearnerState, deployment: Deployment) -> str:
        """Run or finish a round when the deployment allows it; returns what happened."""
        current = deployment.state()
        blocked = self._blocked(current)
        if blocked:
            self._wait(blocked)
            return "waiting"
        assert current is not None
        last = state.rounds[-1] if state.rounds else None
        if last is not None and last.status in ("learning", "learned") and last.champion != current.champion:
            self._stale(state, last, current)  # learned (or learning) from a champion that serves no more
        if last is None or last.status not in ("learning", "learned"):
            if not self._due(state):
                return "waiting"
            left = self._budget_left(state, None)
            if left is not None and left <= 0:
                return self._out_of_budget(state)
            last = self.begin_round(state, deployment, current)
        if last.status == "learning":
            outcome = await self.learn_round(state, last)
            if outcome != "learned":
                return outcome
        return self.propose(state, last, deployment)

    def _budget_left(self, state: LearnerState, entry: Round | None) -> float | None:
        """What `llm.budget_usd` leaves for `entry` (a new round: None) after every other round's cost."""
        if self.config.llm.budget_usd is None:
            return None
        return self.config.llm.budget_usd - sum(r.cost_usd for r in state.rounds if r is not entry)

    def _out_of_budget(self, state: LearnerState) -> str:
        self.say(f"llm.budget_usd {self.config.llm.budget_usd:g} is spent (${state.cost_usd:.4f}); stopping")
        return "budget_exceeded"

    def _blocked(self, current: DeploymentState | None) -> str:
        if current is None:
            return "waiting for `tfgrpo serve` to start the deployment on this store"
        if current.learning_paused:
            return "learning is paused (deployment); nothing is learned or proposed"
        if current.challenger is not None:
            return f"challenger {current.challenger[:12]} is under test; the next round waits for its decision"
        return ""

    def _due(self, state: LearnerState) -> bool:
        if not state.pending:
            return False
        if state.pending_rewarded >= self.config.propose_every:
            return True
        interval = self.config.propose_interval_min
        return interval is not None and time.time() - state.since >= interval * 60

    def begin_round(self, state: LearnerState, deployment: Deployment, current: DeploymentState) -> Round:
        """The waiting prompts and the champion written into a new round's folder."""
        problems = list(state.pending.values())  # at most max_problems: `read_new` keeps no more
        number = len(state.rounds) + 1
        folder = self.run.round_dir(number)
        deployment.library(current.champion).save(folder / "champion.json")
        atomic_write_text(
            folder / "problems.jsonl", "".join(json.dumps(_row(p), ensure_ascii=False) + "\n" for p in problems)
        )
        entry = Round(
            number=number,
            champion=current.champion,
            problems=len(problems),
            rewarded=state.pending_rewarded,
            started_at=time.time(),
        )
        state.pending, state.pending_rewarded, state.since = {}, 0, entry.started_at
        state.rounds.append(entry)
        self.run.save(state)
        self.say(f"round {number}: {len(problems)} prompts from champion {current.champion[:12]}")
        return entry

    async def learn_round(self, state: LearnerState, entry: Round) -> str:
        """The round's learn run (resumed when a restart finds it begun); returns learned, or why not."""
        folder = self.run.round_dir(entry.number)
        budget = self._budget_left(state, entry)
        if budget is not None and budget <= 0:
            return self._out_of_budget(state)
        config = self.config.round_config(
            data=str(folder / "problems.jsonl"),
            out=str(folder / "learn"),
            init_library=str(folder / "champion.json"),
            budget_usd=budget,
            resume=(folder / "learn" / "state.json").is_file(),
        )
        try:
            result = await learn_async(config, console=self.console)
        except LLMError as exc:  # an outage: the round stays begun, and is resumed at the next poll
            self.say(f"round {entry.number}: {exc}; resumed at the next poll")
            return "failed"
        totals = result.metrics.get("totals", {})
        entry.cost_usd = float(totals.get("cost_usd", 0.0))
        entry.usage = {key: totals[key] for key in ("prompt_tokens", "completion_tokens", "rollouts") if key in totals}
        if result.status == "interrupted":
            self.run.save(state)
            return "interrupted"
        if result.status != "completed":  # the budget: the round stays begun, resumed by a learner given more
            self.run.save(state)
            return self._out_of_budget(state)
        entry.challenger = Snapshot.of(result.library).content_hash
        if entry.challenger == entry.champion:
            self._end(state, entry, "unchanged", "the round changed nothing in the champion")
            return "unchanged"
        entry.status = "learned"
        self.run.save(state)
        return "learned"

    def propose(self, state: LearnerState, entry: Round, deployment: Deployment) -> str:
        """The round's library under test as the challenger, if the champion it learned from still serves."""
        assert entry.challenger is not None
        current = deployment.state()
        if current is not None and current.champion != entry.champion:
            return self._stale(state, entry, current)
        library = Library.load(self.run.round_dir(entry.number) / "learn" / "library.json")
        if deployment.was_rolled_back(entry.challenger):  # a test already found it no better: not again
            return self._end(state, entry, "refused", "not proposed: this very library was rolled back before")
        leaks = leaked_test_material(library, self.config.test_data)
        if leaks:  # the same lockout as `tfgrpo deploy propose`: such a library never reaches traffic
            return self._end(state, entry, "refused", f"not proposed: it carries test-set material ({leaks[0]})")
        source = f"learner {self.name} round {entry.number}"
        try:
            deployment.propose(library, entry.challenger, source=source, by=f"learner {self.name}")
        except StaleRevision as exc:
            now = deployment.state()
            if now is None or now.challenger != entry.challenger:  # not ours: try again at the next poll
                self._wait(f"round {entry.number} not proposed yet: {exc}")
                return "waiting"
        return self._end(state, entry, "proposed", f"challenger {entry.challenger[:12]} proposed")

    def _stale(self, state: LearnerState, entry: Round, current: DeploymentState) -> str:
        """The round's prompts wait again, for a round from the new champion (no newer answer replaced)."""
        lines = (self.run.round_dir(entry.number) / "problems.jsonl").read_text(encoding="utf-8").splitlines()
        for line in lines:
            row = json.loads(line)
            problem = Problem(
                id=row["id"],
                problem=row["problem"],
                answer=row.get("answer"),
                extra={"exchange_id": row["exchange_id"], "prompt_key": row["prompt_key"]},
            )
            if len(state.pending) < self.config.max_problems:
                state.pending.setdefault(row["prompt_key"], problem.model_dump())
        state.pending_rewarded += entry.rewarded
        return self._end(state, entry, "stale", f"the champion is now {current.champion[:12]}; prompts re-queued")

    def _end(self, state: LearnerState, entry: Round, status: RoundStatus, message: str) -> str:
        entry.status, entry.message, entry.ended_at = status, message, time.time()
        self.run.save(state)
        self.say(
            f"round {entry.number}: {status}: {message} (cost ${entry.cost_usd:.4f}; all rounds ${state.cost_usd:.4f})"
        )
        return status

    # -- saying ----------------------------------------------------------------------------------------
    def _wait(self, reason: str) -> None:
        if reason != self._waiting:
            self._waiting = reason
            self.say(reason)

    def say(self, line: str) -> None:
        self.run.log(line)
        self.console.print(f"learner: {line}", highlight=False, markup=False)

    def _cursor_text(self, state: LearnerState) -> str:
        cursor = Cursor(**state.cursor)
        if state.ground_truth:
            return f"feedback {cursor.feedback_id}" if cursor.feedback_id else "the first feedback"
        return f"exchange {cursor.exchange_id[:12]}" if cursor.exchange_id else "the first exchange"


def _row(problem: dict[str, Any]) -> dict[str, Any]:
    """A waiting problem as a row of the round's data file (learn reads id, problem, answer; the rest is kept)."""
    answer = {"answer": problem["answer"]} if problem.get("answer") is not None else {}
    return {"id": problem["id"], "problem": problem["problem"], **answer, **problem["extra"]}


def run_learner(config: LearnerConfig, *, console: Any | None = None) -> LearnerResult:
    """Run the learner until it stops; Ctrl-C stops it cleanly (the state is saved after every change)."""
    learner = Learner(config, console=console)
    try:
        return asyncio.run(learner.run_async())
    except KeyboardInterrupt:
        path = learner.run.state_path
        state = (
            LearnerState.model_validate_json(path.read_text(encoding="utf-8"))
            if path.is_file()
            else LearnerState(ground_truth=config.ground_truth)
        )
        return LearnerResult("interrupted", state)


__all__ = ["Learner", "LearnerResult", "run_learner"]
