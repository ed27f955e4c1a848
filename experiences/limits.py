"""Default thresholds of the library's editing tools and the token estimate, in a module with no imports of
ours: the CLI shows and uses them without loading the parser, the apply engine or the vector store
(`tfgrpo library show` stays fast)."""

import math

#: most words an experience may have (longer ones are rejected by the parser)
DEFAULT_MAX_WORDS = 32
#: cosine similarity at which `library dedup` reports two experiences as near-duplicates
DEFAULT_THRESHOLD = 0.90
#: cosine similarity from which two lessons with no difference in meaning (tfgrpo.experiences.contrast) are one lesson:
#: `tfgrpo learn`'s enforced dedup and `library dedup --merge` (tfgrpo.experiences.dedup.is_near_duplicate)
SAME_LESSON_COSINE = 0.70
DEFAULT_MERGE_THRESHOLD = SAME_LESSON_COSINE


def approximate_tokens(text: str) -> int:
    """About 4 characters per token for English with BPE tokenizers; pass a tokenizer's count for exact budgets."""
    return math.ceil(len(text) / 4)
