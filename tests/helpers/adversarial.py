"""Long and adversarial strings for the text scanners (leakage guard, reply parser, answer extraction).

Each family repeats a piece that opens something a scanner may read to the end of the text and back: a
word with no `^` after it, an unclosed bracket, box, math span or fence. `seeded_mixture` adds random
interleavings of those pieces. A scanner is linear-ish when reading ten times the text costs at most a
loose multiple of ten times the work (a quadratic one costs a hundred times): `growth` measures that
ratio in CPU time of this thread, the best of a few runs, so another process's load does not count.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

PIECES = {
    "word": "a",
    "digits": "1",
    "power": "a^",
    "power-brace": "a^{",
    "thousands": "1,111",
    "fraction": "\\frac{",
    "boxed": "\\boxed{",
    "boxed-bare": "\\boxed ",
    "dollar": "$a",
    "paren-math": "\\(",
    "brace": "{",
    "bracket": "[",
    "objects": '[{"',
    "single-quote": "['",
    "comment": "[//",
    "answer-line": "answer: ",
    "final-answer": "final answer ",
    "think": "<think>",
    "fence": "```\n",
    "slash": "1 / ",
    "text-group": "\\text{",
    "name": "Ab  ",  # a capitalised word after spaces: the guard looks back over them for a sentence's end
    "keyed-number": "key 5 ",
    "sum": "1 + ",  # a plain sum read as the number it comes to, however long the chain
    "subscript": "a_{",
    "number-words": "forty one hundred ",  # words after a number, none a unit: each could be split into "units"
}
SIZE = 3_000  # characters of the smaller input; the larger is ten times as long
ALLOWED_GROWTH = 35  # 10x the input: linear work is ~10x, quadratic ~100x
NOISE_FLOOR_S = 0.002  # below this, a run's time is noise: the ratio is taken against at least this


def repeated(piece: str, size: int) -> str:
    return piece * max(1, size // len(piece))


def seeded_mixture(seed: int, size: int) -> str:
    """Random pieces and prose, `size` characters, the same for the same seed."""
    rng = random.Random(seed)
    parts, length = [], 0
    pieces = [*PIECES.values(), " ", "x", "]", "}", '"', "\n", "$", "^"]
    while length < size:
        part = rng.choice(pieces) * rng.randint(1, 50)
        parts.append(part)
        length += len(part)
    return "".join(parts)[:size]


def cpu_seconds(call: Callable[[str], object], text: str, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.thread_time()
        call(text)
        best = min(best, time.thread_time() - started)
    return best


def growth(call: Callable[[str], object], make: Callable[[int], str], size: int = SIZE) -> float:
    """CPU time on a ten-times larger input over CPU time on the smaller one (floored at NOISE_FLOOR_S)."""
    small = cpu_seconds(call, make(size))
    large = cpu_seconds(call, make(10 * size), runs=1 if small > NOISE_FLOOR_S else 3)
    return large / max(small, NOISE_FLOOR_S)
