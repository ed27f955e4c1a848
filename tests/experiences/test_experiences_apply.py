"""Apply semantics: ids, lineage, rejections, word limit, budget with eviction, the library model."""

from __future__ import annotations

import json
import logging

import pytest

from tfgrpo.experiences import (
    AddOp,
    Budget,
    DeleteOp,
    Library,
    LibraryFileError,
    MergeOp,
    ModifyOp,
    Provenance,
    apply_operations,
    parse_operations,
    render,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def library() -> Library:
    return Library.from_texts(
        ["Check the domain.", "Simplify fractions.", "Verify roots by substitution."], task="math"
    )


def test_add_gets_fresh_id_and_provenance(library: Library) -> None:
    result = apply_operations(
        library,
        [AddOp(experience="Draw a diagram.")],
        step=7,
        provenance={"run": "r1", "epoch": 1, "batch": 2, "query_ids": ["q3", "q9"]},
    )
    new = result.library.get("G3")
    assert new.text == "Draw a diagram." and new.created_step == 7 and new.updated_step == 7
    assert new.provenance == Provenance(run="r1", epoch=1, step=7, batch=2, query_ids=["q3", "q9"], operation="add")
    assert result.library.version == library.version + 1 and result.library.step == 7
    assert [a.ids for a in result.applied] == [["G3"]]


def test_input_library_is_not_mutated(library: Library) -> None:
    before = library.model_dump()
    apply_operations(library, [AddOp(experience="x y"), DeleteOp(id="G0"), ModifyOp(id="G1", experience="z")])
    assert library.model_dump() == before


def test_ids_are_never_reused_after_delete(library: Library) -> None:
    first = apply_operations(library, [DeleteOp(id="G2")]).library
    second = apply_operations(first, [AddOp(experience="Something new.")]).library
    assert second.ids == ["G0", "G1", "G3"]


def test_modify_keeps_id_and_position(library: Library) -> None:
    result = apply_operations(library, [ModifyOp(id="G1", experience="Simplify fractions early.")], step=3)
    assert result.library.ids == ["G0", "G1", "G2"]
    changed = result.library.get("G1")
    assert (
        changed.text == "Simplify fractions early."
        and changed.updated_step == 3
        and changed.provenance.operation == "modify"
    )


def test_unknown_ids_are_rejected_not_added(library: Library) -> None:
    result = apply_operations(
        library,
        [ModifyOp(id="G9", experience="New text."), DeleteOp(id="G8"), MergeOp(ids=("G0", "G7"), experience="m")],
    )
    assert not result.applied and not result.changed
    assert [r.reason for r in result.rejected] == ["unknown id 'G9'", "unknown id 'G8'", "unknown id 'G7'"]
    assert result.library.ids == library.ids and result.library.version == library.version


def test_merge_removes_sources_and_records_lineage(library: Library) -> None:
    library.record_usage(["G0", "G2"], correct=True)
    library.record_usage(["G2"], correct=False)
    result = apply_operations(
        library, [MergeOp(ids=("G0", "G2"), experience="Check the domain and verify roots.")], step=4
    )
    lib = result.library
    assert lib.ids == ["G3", "G1"]  # the merged lesson takes the first source's place
    merged = lib.get("G3")
    assert merged.parents == ["G0", "G2"] and merged.provenance.operation == "merge" and merged.created_step == 4
    assert (merged.usage.in_context, merged.usage.correct, merged.usage.wrong) == (3, 2, 1)


def test_operations_see_earlier_ones(library: Library) -> None:
    result = apply_operations(library, [DeleteOp(id="G0"), ModifyOp(id="G0", experience="too late")])
    assert [a.operation for a in result.applied] == [DeleteOp(id="G0")]
    assert result.rejected[0].reason == "unknown id 'G0'"


def test_exact_duplicate_add_is_rejected(library: Library) -> None:
    result = apply_operations(library, [AddOp(experience="  check the   DOMAIN. ")])
    assert result.rejected[0].reason == "same text as existing G0" and len(result.library) == 3


def test_word_limit_default_32(library: Library) -> None:
    long_text = " ".join(["w"] * 33)
    result = apply_operations(library, [AddOp(experience=long_text), AddOp(experience=" ".join(["w"] * 32))])
    assert result.rejected[0].reason == "text has 33 words; the limit is 32"
    assert len(result.applied) == 1
    assert apply_operations(library, [AddOp(experience=long_text)], max_words=None).applied


def test_budget_max_items_evicts_lowest_value_first(library: Library, caplog: pytest.LogCaptureFixture) -> None:
    # G1 helped, G2 hurt, G0 unused: order of value is G2 (0.25) < G0 (0.5) < G1 (0.67)
    library.record_usage(["G1"], correct=True)
    library.record_usage(["G2"], correct=False)
    with caplog.at_level(logging.INFO, logger="tfgrpo.experiences.apply"):
        result = apply_operations(library, [AddOp(experience="New lesson.")], step=5, budget=Budget(max_items=2))
    assert [e.experience.id for e in result.evicted] == ["G2", "G0"]
    assert result.library.ids == ["G1", "G3"]
    assert "max_items 2" in result.evicted[0].reason
    assert "evicted G2" in caplog.text
    kinds = [r["kind"] for r in result.log_records()]
    assert kinds == ["applied", "evicted", "evicted"]


def test_budget_ties_broken_by_age() -> None:
    lib = Library(
        experiences=[
            {"id": "G0", "text": "old", "updated_step": 1},
            {"id": "G1", "text": "newer", "updated_step": 5},
            {"id": "G2", "text": "middle", "updated_step": 3},
        ]
    )
    result = apply_operations(lib, [], budget=Budget(max_items=1))
    assert [e.experience.id for e in result.evicted] == ["G0", "G2"]
    assert result.library.version == 1  # eviction is a change


def test_budget_max_prompt_tokens_uses_the_renderer(library: Library) -> None:
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text.split())

    # rendered lines are "[Gi]. text": 3 + 3 + 5 = 11 words
    result = apply_operations(library, [], budget=Budget(max_prompt_tokens=8), count_tokens=count)
    assert len(result.evicted) == 1 and len(result.library) == 2
    assert counted[0] == render(library)


def test_no_change_keeps_version(library: Library) -> None:
    result = apply_operations(library, [], budget=Budget(max_items=10))
    assert not result.changed and result.library.version == library.version


def test_parse_then_apply_round_trip(library: Library) -> None:
    reply = '```json\n[{"operation": "ADD", "content": "Estimate first."}, {"option": "delete", "id": "G0"}]\n```'
    parsed = parse_operations(reply, library)
    result = apply_operations(library, parsed.operations, step=1)
    assert result.library.ids == ["G1", "G2", "G3"] and result.library.get("G3").text == "Estimate first."


# -- the library model ----------------------------------------------------------------------------------
def test_hand_written_file_with_only_id_and_text_loads(tmp_path) -> None:
    path = tmp_path / "lib.json"
    path.write_text(
        json.dumps(
            {
                "version": 3,
                "experiences": [{"id": "G0", "text": "a"}, {"id": "G7", "text": "b"}, {"id": "tip", "text": "c"}],
            }
        )
    )
    lib = Library.load(path)
    assert lib.version == 3 and lib.ids == ["G0", "G7", "tip"] and lib.get("G7").usage.in_context == 0
    assert lib.allocate_id() == "G8"  # after the largest generated-looking id


def test_save_load_round_trip(tmp_path, library: Library) -> None:
    library.record_usage(["G1"], correct=True)
    library.metadata["dataset"] = "dapo100"
    path = library.save(tmp_path / "sub" / "lib.json")
    assert Library.load(path) == library
    data = json.loads(path.read_text())
    assert data["format"] == "tfgrpo.library/1" and data["experiences"][0]["id"] == "G0"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON at line 1"),
        ('["a", "b"]', "expected a JSON object"),
        ('{"version": 1, "experiences": [{"id": "G0"}]}', "experiences[0].text: required key is missing"),
        ('{"version": 1, "experiences": [{"id": "G0", "text": "a", "txt": "b"}]}', "unknown key 'experiences[0].txt'"),
        ('{"version": 1, "experiences": [{"id": "G0", "text": "a"}, {"id": "G0", "text": "b"}]}', "duplicate id 'G0'"),
        ('{"format": "tfgrpo.library/9", "experiences": []}', "unsupported library format"),
        ('{"version": -1, "experiences": []}', "version"),
        ('{"version": 1, "experiences": [{"id": "G 0", "text": "a"}]}', "without spaces"),
    ],
)
def test_bad_library_files_name_the_problem(tmp_path, content: str, fragment: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(LibraryFileError, match=None) as info:
        Library.load(path)
    assert fragment in str(info.value) and str(path) in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(LibraryFileError, match="not found"):
        Library.load("/nonexistent/lib.json")


def test_a_groups_rollouts_counted_at_once_equal_them_counted_one_by_one(library: Library) -> None:
    one_by_one, at_once = library.model_copy(deep=True), library.model_copy(deep=True)
    outcomes = [True, False, None, True, True]  # None: a rollout whose reward is unknown
    for outcome in outcomes:
        one_by_one.record_usage(["G0", "G2"], correct=outcome)
    at_once.record_rollouts(["G0", "G2"], rollouts=5, correct=3, wrong=1)
    assert [e.usage for e in at_once.experiences] == [e.usage for e in one_by_one.experiences]
    assert (at_once.get("G0").usage.in_context, at_once.get("G1").usage.in_context) == (5, 0)
