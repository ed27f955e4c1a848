"""The vector store in a process of its own (what a learn run uses): the same answers as the store in process,
one-line errors when the process fails, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfgrpo.experiences import AddOp, Injection, Library, ModifyOp
from tfgrpo.experiences.dedup import enforce_dedup
from tfgrpo.experiences.errors import ExperienceError
from tfgrpo.experiences.store import ExperienceStore
from tfgrpo.experiences.store_process import StoreProcess

pytestmark = pytest.mark.timeout(180)

LESSONS = [
    "Check the answer by substituting it back into the original equation.",
    "Always simplify fractions before comparing them.",
    "For counting problems, consider complementary counting to avoid overcounting.",
    "In probability questions, make sure the probabilities of all outcomes sum to one.",
]
PROPOSED = [
    AddOp(experience="Substitute the answer back into the original equation to check it."),  # a paraphrase
    AddOp(experience="Draw a diagram before any geometry computation."),
    ModifyOp(id="G2", experience="Simplify every fraction before comparing two of them."),
]


@pytest.fixture
def process(tmp_path: Path):
    store = StoreProcess(tmp_path / "store", log_path=tmp_path / "store.log")
    yield store
    store.close()


def test_it_answers_as_the_store_in_process_does(process, tmp_path):
    library = Library.from_texts(LESSONS)
    local = ExperienceStore(tmp_path / "local")
    for store in (process, local):
        store.sync(library)
    assert len(process) == len(local) == 4
    query = "How do I verify a solution of an equation?"
    assert [m.id for m in process.query(query, k=2)] == [m.id for m in local.query(query, k=2)]
    assert process.query_many([query, "fractions"], k=1) == local.query_many([query, "fractions"], k=1)
    [there], [here] = process.embed(["a lesson"]), local.embed(["a lesson"])
    assert there == pytest.approx(list(here), abs=1e-6)
    folded_there = enforce_dedup(library, [op.model_copy() for op in PROPOSED], process)
    folded_here = enforce_dedup(library, [op.model_copy() for op in PROPOSED], local)
    assert folded_there.operations == folded_here.operations and folded_there.decisions == folded_here.decisions
    assert folded_there.decisions  # the paraphrase was folded, so the comparison above compared something
    selected = Injection.parse("topk:2").select(library, query=query, store=process)
    assert [e.id for e in selected] == [
        e.id for e in Injection.parse("topk:2").select(library, query=query, store=local)
    ]


def test_an_empty_librarys_adds_are_compared_without_opening_the_collection(tmp_path):
    process = StoreProcess(tmp_path / "store", open_at_start=False)
    folded = enforce_dedup(
        Library(), [AddOp(experience=LESSONS[0]), AddOp(experience=LESSONS[0] + " ")], process.embedder
    )
    assert len(folded.operations) == 1  # the repeated add folded by the embedder alone
    assert not (tmp_path / "store").exists()  # chromadb never opened
    process.close()


def test_a_library_already_sent_is_not_sent_again(process):
    library = Library.from_texts(LESSONS)
    process.sync(library)
    calls = []
    original = process._call
    process._call = lambda *args, **kwargs: calls.append(args[0]) or original(*args, **kwargs)
    process.sync(library)
    process.query("fractions", k=1)
    assert calls == ["query"]


def test_a_failing_call_is_one_line_and_the_process_keeps_serving(process):
    process.sync(Library.from_texts(LESSONS))
    with pytest.raises(ExperienceError, match=r"^vector store: \w+Error: "):
        process.query_vectors([[0.1, 0.2]], k=1)  # 2 dimensions against 384
    assert process.embed(["still here"])


def test_a_killed_store_process_is_one_clear_error(process, tmp_path):
    process.wait_ready()
    os.kill(process._process.pid, signal.SIGKILL)
    with pytest.raises(ExperienceError, match=r"the vector store's process ended \(exit -9\); its log: .*store.log"):
        process.embed(["anything"])


def test_the_process_ends_with_its_parent(tmp_path):
    """A learn run killed with SIGKILL leaves no store process: the child sees its socket close and exits."""
    code = (
        "import sys, time\n"
        "from tfgrpo.experiences.store_process import StoreProcess\n"
        f"store = StoreProcess({str(tmp_path / 's')!r})\n"
        "store.wait_ready()\n"
        "print(store._process.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def test_close_ends_the_process_and_leaves_no_empty_log(tmp_path):
    store = StoreProcess(None, log_path=tmp_path / "store.log", open_at_start=False)
    store.wait_ready()
    store.close()
    assert store._process.returncode == 0
    assert not (tmp_path / "store.log").exists() or (tmp_path / "store.log").stat().st_size


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
