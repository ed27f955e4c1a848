"""The tolerant parser against a corpus of messy LLM replies (each shape the issue lists, and garbage)."""

from __future__ import annotations

import pytest

from tfgrpo.experiences import AddOp, DeleteOp, Library, MergeOp, ModifyOp, parse_operations
from tfgrpo.experiences.model import MAX_EXPERIENCE_CHARS

pytestmark = pytest.mark.timeout(60)

LIB = Library.from_texts([f"lesson number {i}" for i in range(5)])  # G0..G4

A = {"option": "add", "experience": "Check the domain first."}
M = {"option": "modify", "id": "G1", "experience": "Simplify before solving."}
D = {"option": "delete", "id": "G2"}
G = {"option": "merge", "ids": ["G3", "G4"], "experience": "Verify each root."}
LONG = " ".join(["word"] * 33)

# (name, reply, expected operations (wire dicts), expected rejection reason fragments, found)
CORPUS: list[tuple[str, str, list[dict], list[str], bool]] = [
    # -- clean shapes
    ("bare list", '[{"option": "add", "experience": "Check the domain first."}]', [A], [], True),
    (
        "all four options",
        '[{"option": "add", "experience": "Check the domain first."}, {"option": "modify", "id": "G1", "experience": "Simplify before solving."},'
        ' {"option": "delete", "id": "G2"}, {"option": "merge", "ids": ["G3", "G4"], "experience": "Verify each root."}]',
        [A, M, D, G],
        [],
        True,
    ),
    ("empty list", "[]", [], [], True),
    ("empty list in fence", "Nothing to change.\n```json\n[]\n```", [], [], True),
    # -- fences and prose
    ("json fence", 'Here you go:\n```json\n[{"option": "delete", "id": "G2"}]\n```\nDone.', [D], [], True),
    ("JSON fence uppercase", '```JSON\n[{"option": "delete", "id": "G2"}]\n```', [D], [], True),
    ("plain fence", '```\n[{"option": "delete", "id": "G2"}]\n```', [D], [], True),
    ("tilde fence", '~~~json\n[{"option": "delete", "id": "G2"}]\n~~~', [D], [], True),
    ("unclosed fence", '```json\n[{"option": "delete", "id": "G2"}]', [D], [], True),
    (
        "prose around bare json",
        'Sure! I will remove G2. [{"option": "delete", "id": "G2"}] Hope this helps.',
        [D],
        [],
        True,
    ),
    (
        "prose with brackets before",
        'Looking at [G1] and {the interval [0, 1)}, I suggest: [{"option": "delete", "id": "G2"}]',
        [D],
        [],
        True,
    ),
    (
        "two fences, last wins",
        '```json\n[{"option": "delete", "id": "G0"}]\n```\nWait, better:\n```json\n[{"option": "delete", "id": "G2"}]\n```',
        [D],
        [],
        True,
    ),
    (
        "fence preferred over bare",
        'Example: [{"option": "delete", "id": "G0"}]\n```json\n[{"option": "delete", "id": "G2"}]\n```',
        [D],
        [],
        True,
    ),
    ("latex in prose", r'The answer is \boxed{3}. Ops: [{"option": "delete", "id": "G2"}]', [D], [], True),
    # -- reasoning blocks
    (
        "think block",
        '<think>maybe [{"option": "delete", "id": "G0"}]?</think>\n[{"option": "delete", "id": "G2"}]',
        [D],
        [],
        True,
    ),
    ("thinking tag", '<thinking>hmm</thinking>```json\n[{"option": "delete", "id": "G2"}]\n```', [D], [], True),
    ("only a closing think", 'reasoning in the template...</think>[{"option": "delete", "id": "G2"}]', [D], [], True),
    ("cut off inside think", '<think>I should [{"option": "delete", "id": "G0"}] maybe', [], [], False),
    # -- lenient JSON
    ("line comments", '[\n  // remove the stale one\n  {"option": "delete", "id": "G2"} // done\n]', [D], [], True),
    ("hash comments", '[\n  # remove\n  {"option": "delete", "id": "G2"}  # stale\n]', [D], [], True),
    ("block comment", '[/* stale */ {"option": "delete", "id": "G2"}]', [D], [], True),
    (
        "comment markers inside strings kept",
        '[{"option": "add", "experience": "Use // and # literally."}]',
        [{"option": "add", "experience": "Use // and # literally."}],
        [],
        True,
    ),
    ("trailing commas", '[{"option": "delete", "id": "G2",},]', [D], [], True),
    ("single quotes", "[{'option': 'delete', 'id': 'G2'}]", [D], [], True),
    (
        "single quotes with apostrophe",
        "[{'option': 'add', 'experience': 'Don't skip the domain check.'}]",
        [{"option": "add", "experience": "Don't skip the domain check."}],
        [],
        True,
    ),
    ("single object", '{"option": "delete", "id": "G2"}', [D], [], True),
    (
        "single object in fence",
        '```json\n{"option": "merge", "ids": ["G3", "G4"], "experience": "Verify each root."}\n```',
        [G],
        [],
        True,
    ),
    ("wrapper object", '{"operations": [{"option": "delete", "id": "G2"}]}', [D], [], True),
    ("raw newline in string", '[{"option": "add", "experience": "Check the\ndomain first."}]', [A], [], True),
    ("python literals and missing comma", '[{"option": "delete" "id": "G2"}]', [D], [], True),
    # -- reference implementation aliases
    ("operation ADD content", '[{"operation": "ADD", "content": "Check the domain first."}]', [A], [], True),
    ("UPDATE with id", '[{"operation": "UPDATE", "id": "G1", "content": "Simplify before solving."}]', [M], [], True),
    (
        "modified_from",
        '[{"option": "modify", "experience": "Simplify before solving.", "modified_from": "G1"}]',
        [M],
        [],
        True,
    ),
    (
        "merged_from",
        '[{"option": "merge", "experience": "Verify each root.", "merged_from": ["G3", "G4"]}]',
        [G],
        [],
        True,
    ),
    (
        "UPDATE with merged_from is a merge",
        '[{"operation": "UPDATE", "content": "Verify each root.", "merged_from": ["G3", "G4"]}]',
        [G],
        [],
        True,
    ),
    ("DELETE", '[{"operation": "DELETE", "id": "G2"}]', [D], [], True),
    ("NONE skipped", '[{"operation": "NONE"}, {"operation": "DELETE", "id": "G2"}]', [D], [], True),
    (
        "id spellings",
        '[{"option": "delete", "id": "[G2]"}, {"option": "modify", "id": "g1", "experience": "Simplify before solving."}]',
        [D, M],
        [],
        True,
    ),
    ("numeric id", '[{"option": "delete", "id": 2}]', [D], [], True),
    (
        "merge ids as numbers",
        '[{"option": "merge", "ids": [3, "G4"], "experience": "Verify each root."}]',
        [G],
        [],
        True,
    ),
    # -- rejections, each with a reason
    (
        "unknown id",
        '[{"option": "delete", "id": "G9"}, {"option": "delete", "id": "G2"}]',
        [D],
        ["unknown id 'G9'"],
        True,
    ),
    ("modify unknown id", '[{"option": "modify", "id": "G42", "experience": "x"}]', [], ["unknown id 'G42'"], True),
    ("empty text", '[{"option": "add", "experience": "   "}]', [], ["empty experience text"], True),
    ("missing text", '[{"option": "add"}]', [], ["missing 'experience'"], True),
    ("over word limit", f'[{{"option": "add", "experience": "{LONG}"}}]', [], ["33 words; the limit is 32"], True),
    (
        "unknown option",
        '[{"option": "rename", "id": "G1"}, {"option": "delete", "id": "G2"}]',
        [D],
        ["unknown option 'rename'"],
        True,
    ),
    (
        "missing option",
        '[{"id": "G1", "experience": "x"}, {"option": "delete", "id": "G2"}]',
        [D],
        ["missing 'option'"],
        True,
    ),
    ("merge with one id", '[{"option": "merge", "ids": ["G3"], "experience": "x"}]', [], ["two or more"], True),
    (
        "merge same id twice",
        '[{"option": "merge", "ids": ["G3", "G3"], "experience": "x"}]',
        [],
        ["two or more"],
        True,
    ),
    ("delete without id", '[{"option": "delete"}]', [], ["needs the 'id'"], True),
    ("non-object item", '[{"option": "delete", "id": "G2"}, "also add something"]', [D], ["expected an object"], True),
    ("text not a string", '[{"option": "add", "experience": ["a", "b"]}]', [], ["must be a string"], True),
    (
        "truncated reply",
        '[{"option": "delete", "id": "G2"}, {"option": "add", "experience": "Check the dom',
        [D],
        ["incomplete"],
        True,
    ),
    # -- garbage
    ("empty reply", "", [], [], False),
    ("plain prose", "I think the library is fine as it is.", [], [], False),
    ("list of strings", '["Check the domain first.", "Simplify."]', [], [], False),
    ("unrelated json", '{"answer": 42, "confidence": 0.9}', [], [], False),
    ("broken brackets", "[[[[{{{{ ]]]] }}", [], [], False),
    ("pathological nesting", "[" * 5000, [], [], False),
    ("binary-ish noise", "\x00\x01\x02 ```json\n\x00\n```", [], [], False),
]


@pytest.mark.parametrize(("name", "reply", "expected", "reasons", "found"), CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus(name: str, reply: str, expected: list[dict], reasons: list[str], found: bool) -> None:
    result = parse_operations(reply, LIB)
    assert [op.to_wire() for op in result.operations] == expected
    assert len(result.rejected) == len(reasons), [r.reason for r in result.rejected]
    for rejection, fragment in zip(result.rejected, reasons, strict=False):
        assert fragment in rejection.reason
    assert result.found is found


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 40


def test_operation_types() -> None:
    result = parse_operations(CORPUS[1][1], LIB)
    assert [type(op) for op in result.operations] == [AddOp, ModifyOp, DeleteOp, MergeOp]


def test_without_library_ids_are_not_checked() -> None:
    result = parse_operations('[{"option": "delete", "id": "G99"}]')
    assert result.operations == [DeleteOp(id="G99")]


def test_word_limit_is_configurable() -> None:
    reply = f'[{{"option": "add", "experience": "{LONG}"}}]'
    assert parse_operations(reply, LIB, max_words=40).operations
    assert parse_operations(reply, LIB, max_words=None).operations


def test_noop_items_are_counted_not_rejected() -> None:
    result = parse_operations('[{"operation": "NONE"}, {"option": "keep"}]', LIB)
    assert result.skipped == 2 and result.ok and not result.operations


def test_feedback_lists_each_rejection_and_the_format() -> None:
    result = parse_operations(
        '[{"option": "delete", "id": "G9"}, {"option": "add", "experience": ""}, {"option": "delete", "id": "G2"}]',
        LIB,
    )
    text = result.feedback()
    assert "2 of the 3 operations" in text
    assert "item 1" in text and "unknown id 'G9'" in text and "G0, G1, G2, G3, G4" in text
    assert "item 2" in text and "empty experience text" in text
    assert '"option": "add"' in text  # the expected format is restated


def test_feedback_when_nothing_found_and_when_all_good() -> None:
    assert "could not find a JSON list" in parse_operations("no idea", LIB).feedback()
    assert "cut off" in parse_operations("<think>still thinking", LIB).feedback()
    assert parse_operations('[{"option": "delete", "id": "G2"}]', LIB).feedback() == ""


def test_never_crashes_on_odd_inputs() -> None:
    odd = [
        None,
        42,
        "[" + '{"option": "add", "experience": "x"},' * 2000,
        "{" * 3000 + "}" * 3000,
        "'''''",
        "[{'a': 'b'}]",
        '[{"option": null, "id": null}]',
        '[{"option": 5}]',
        '[{"option": "add", "experience": null}]',
        "```json```" * 50,
    ]
    for reply in odd:
        result = parse_operations(reply, LIB)  # type: ignore[arg-type]
        assert isinstance(result.feedback(), str)


def test_parse_result_serialises_for_stage_logs() -> None:
    result = parse_operations('[{"option": "delete", "id": "G2"}, {"option": "delete", "id": "G9"}]', LIB)
    data = result.model_dump(mode="json")
    assert data["operations"] == [D] and data["rejected"][0]["item"] == {"option": "delete", "id": "G9"}


def test_a_lesson_longer_than_an_experience_may_be_is_rejected_not_raised():
    # Without a word limit the library's own bound still holds: an item, not a crash in the middle of a run.
    text = "word " * (MAX_EXPERIENCE_CHARS // 5 + 10)
    result = parse_operations(f'[{{"option": "add", "experience": "{text}."}}]', LIB, max_words=None)
    assert not result.operations
    assert f"the limit is {MAX_EXPERIENCE_CHARS:,}" in result.rejected[0].reason
