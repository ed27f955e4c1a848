"""The response cache commits the samples of one event-loop turn together, and no caller resumes before that."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.cache import ResponseCache
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.types import Completion, Usage


def completion(text: str) -> Completion:
    return Completion(text=text, usage=Usage(prompt_tokens=3, completion_tokens=2))


def commits_of(cache: ResponseCache) -> list[str]:
    """A list that receives every SQL statement the cache's connection runs from now on."""
    statements: list[str] = []
    cache._conn.set_trace_callback(statements.append)
    return statements


def count_commits(statements: list[str]) -> int:
    return sum(1 for s in statements if s.strip().upper() == "COMMIT")


async def test_callers_of_one_turn_share_one_commit_and_resume_with_their_rows_on_disk(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    statements = commits_of(cache)
    seen_by_another_connection: list[int] = []

    async def put(i: int) -> None:
        await cache.put_many_in_turn("m", [(f"k{i}", completion(f"text {i}"))])
        with sqlite3.connect(path) as other:  # a resumed process reading the file
            row = other.execute("SELECT payload FROM completions WHERE key = ?", (f"k{i}",)).fetchone()
        seen_by_another_connection.append(row is not None)

    # the tasks start in one turn, so their puts land in one turn too
    await asyncio.gather(*(put(i) for i in range(20)))
    assert seen_by_another_connection == [True] * 20
    assert count_commits(statements) == 1
    assert len(cache) == 20
    assert cache.get("k7").text == "text 7"


async def test_each_turn_commits_its_own_samples(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    statements = commits_of(cache)
    for i in range(3):  # one caller at a time: a commit each, as put_many would
        await cache.put_many_in_turn("m", [(f"k{i}", completion("x"))])
    assert count_commits(statements) == 3
    assert len(cache) == 3


async def test_a_failed_commit_reaches_every_caller_of_its_turn(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.close()  # every insert now fails (sqlite3.ProgrammingError: a closed database)

    results = await asyncio.gather(
        *(cache.put_many_in_turn("m", [(f"k{i}", completion("x"))]) for i in range(4)), return_exceptions=True
    )
    assert len(results) == 4
    assert all(isinstance(r, sqlite3.ProgrammingError) for r in results)


async def test_a_cancelled_caller_does_not_cancel_the_others_commit(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    first = asyncio.ensure_future(cache.put_many_in_turn("m", [("a", completion("a"))]))
    second = asyncio.ensure_future(cache.put_many_in_turn("m", [("b", completion("b"))]))
    await asyncio.sleep(0)  # both have put their rows into the turn
    first.cancel()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert len(cache) == 2  # the cancelled caller's sample is kept: it was paid for


def test_a_cache_outlives_the_event_loop_it_was_used_on(tmp_path):
    """learn, then eval, then a resumed learn: one process may run several loops over the same cache."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    for i in range(3):
        asyncio.run(cache.put_many_in_turn("m", [(f"k{i}", completion("x"))]))
    assert len(cache) == 3


async def test_concurrent_chats_commit_far_fewer_times_than_they_have_samples(tmp_path):
    """Through the client, as a learn wave: 50 requests answered together."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    statements = commits_of(cache)
    client = LLMClient(ScriptedBackend(lambda request, index: f"reply to {request.messages[0].content}"), cache=cache)
    replies = await asyncio.gather(
        *(client.chat([{"role": "user", "content": f"question {i}"}], tag="rollout") for i in range(50))
    )
    assert [r[0].text for r in replies] == [f"reply to question {i}" for i in range(50)]
    assert len(cache) == 50
    assert count_commits(statements) < 10
