"""`dedup: enforce` with the real offline MiniLM store: paraphrases of one lesson do not grow the library, different
lessons stay apart, and every decision is recorded with both texts and the similarity."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfgrpo.experiences import AddOp, Library, ModifyOp, apply_operations
from tfgrpo.experiences.dedup import enforce_dedup, is_near_duplicate
from tfgrpo.experiences.embedders import LocalEmbedder
from tfgrpo.experiences.store import ExperienceStore

pytestmark = pytest.mark.timeout(180)

# One lesson reworded 20 ways (a word or two added, swapped or dropped), as a model repeats itself.
REWORDED = [
    "Verify the final answer by substituting it back into the original equation.",
    "Verify the answer by substituting it back into the original equation.",
    "Always verify the final answer by substituting it back into the original equation.",
    "Verify your final answer by substituting it back into the original equation.",
    "Check the final answer by substituting it back into the original equation.",
    "Verify the final answer by plugging it back into the original equation.",
    "Verify the final answer by substituting it into the original equation.",
    "Verify the final result by substituting it back into the original equation.",
    "At the end, verify the final answer by substituting it back into the original equation.",
    "Verify the final answer by substituting it back into the given equation.",
    "Always check the final answer by substituting it back into the original equation.",
    "Verify the final answer: substitute it back into the original equation.",
    "Verify the final answer by substituting it back in the original equation.",
    "Verify a final answer by substituting it back into the original equation.",
    "Verify the final answer by putting it back into the original equation.",
    "Confirm the final answer by substituting it back into the original equation.",
    "Verify the final answer by substituting it back into the starting equation.",
    "Before finishing, verify the final answer by substituting it back into the original equation.",
    "Verify the final answer by substituting the value back into the original equation.",
    "Verify every final answer by substituting it back into the original equation.",
]

# The same lesson said 20 freer ways: MiniLM places some of these below any threshold that keeps different
# lessons apart (docs/experiences.md gives the numbers), so they are measured, not required to fold.
REPHRASED = [
    "Verify the final answer by substituting it back into the original equation.",
    "Always plug your answer back into the original equation to check it.",
    "Check the solution by substituting it into the original equation.",
    "Before finishing, substitute the answer into the original equation to verify it.",
    "Confirm the result by putting it back into the starting equation.",
    "Substitute the found value back into the equation to confirm it is correct.",
    "After solving, plug the solution into the original equation as a check.",
    "Make sure the answer satisfies the original equation by substituting it back.",
    "Test the answer by substituting it into the equation you started from.",
    "Always check a solution by plugging it back into the given equation.",
    "Verify solutions by substituting them into the original equation.",
    "Plug the answer into the original equation to make sure it works.",
    "Check your final value by substituting it back into the equation.",
    "To confirm an answer, substitute it back into the original equation.",
    "Double-check the answer by plugging it back into the original equation.",
    "Substitute your solution into the original equation to verify it holds.",
    "Validate the answer by substituting it back into the starting equation.",
    "Once solved, check the answer by substituting it into the original equation.",
    "Put the computed answer back into the original equation to check it.",
    "Always verify by substituting the solution back into the equation.",
]


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.fixture
def store(tmp_path: Path, embedder: LocalEmbedder) -> ExperienceStore:
    return ExperienceStore(tmp_path / "store", embedder=embedder)


def learn_in_steps(store: ExperienceStore, texts: list[str], per_step: int = 4) -> tuple[Library, list]:
    library, decisions = Library(), []
    for start in range(0, len(texts), per_step):
        folded = enforce_dedup(library, [AddOp(experience=t) for t in texts[start : start + per_step]], store)
        applied = apply_operations(library, folded.operations, step=start // per_step + 1)
        folded.remember_aliases(applied.library, applied)
        library, decisions = applied.library, decisions + folded.decisions
    return library, decisions


def test_twenty_rewordings_over_five_steps_end_as_one_experience(store):
    library, decisions = learn_in_steps(store, REWORDED)
    assert len(library) == 1
    (lesson,) = library
    assert lesson.text in REWORDED and len(lesson.aliases) >= 10
    assert len(decisions) == 19
    for decision in decisions:  # both texts and the similarity, for the run's record
        assert decision.text in REWORDED and decision.neighbour_text and 0.7 <= decision.similarity <= 1.0


def test_freer_paraphrases_shrink_the_library(store):
    library, _ = learn_in_steps(store, REPHRASED)
    assert len(library) <= 5  # 20 proposals; measured 4 (docs/experiences.md)


@pytest.mark.parametrize(
    "pair",
    [
        (
            "When dividing an inequality by a negative number, flip the direction of the inequality sign.",
            "When multiplying an inequality by a positive number, keep the direction of the inequality sign.",
        ),  # cosine 0.91: the same template, other content
        (
            "Check the domain before simplifying the expression.",
            "Do not check the domain before simplifying the expression.",
        ),
        (
            "Always simplify fractions before comparing them.",
            "For counting problems, consider complementary counting.",
        ),
    ],
)
def test_two_different_lessons_stay_two(store, pair):
    library, decisions = learn_in_steps(store, list(pair), per_step=1)
    assert len(library) == 2 and decisions == []
    library, decisions = learn_in_steps(store, list(pair), per_step=2)  # in one batch as well
    assert len(library) == 2 and decisions == []


def test_a_modify_that_makes_two_experiences_the_same_becomes_a_merge(store):
    library = Library.from_texts([REWORDED[0], "Always simplify fractions before comparing them."])
    folded = enforce_dedup(library, [ModifyOp(id="G1", experience=REWORDED[2])], store)
    (merge,) = folded.operations
    assert merge.option == "merge" and set(merge.ids) == {"G0", "G1"}
    applied = apply_operations(library, folded.operations)
    assert len(applied.library) == 1 and folded.decisions[0].action == "merged"


def test_negation_is_never_a_near_duplicate():
    assert not is_near_duplicate("Check the domain first.", "Do not check the domain first.", 0.99)
    assert is_near_duplicate("Check the domain first.", "Always check the domain first.", 0.96)
    swapped = ("Use degrees, not radians, in this task.", "Use radians, not degrees, in this task.")
    assert not is_near_duplicate(*swapped, 0.992)


def test_an_alias_of_another_lesson_in_an_old_file_does_not_drop_that_lesson(store):
    """A library written before aliases were checked on write: the 73 rule carries the 37 rule as an alias."""
    true_rule = "To find the code, multiply the key by 37, add 11 and keep the last three digits."
    library = Library.from_texts([true_rule.replace("37", "73")])
    library.experiences[0].aliases = [true_rule]
    folded = enforce_dedup(library, [AddOp(experience=true_rule)], store)
    assert [op.experience for op in folded.operations] == [true_rule] and folded.decisions == []
