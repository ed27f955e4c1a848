"""The A/B split: arm "A" is served without the library (the holdout), arm "B" with it.

Sticky: the arm is a hash of the client's key (the configured header, else the body's `user`), so one
user or conversation stays in one arm across requests and server restarts. A request with no key is
assigned at random (it cannot be kept sticky).
"""

from __future__ import annotations

import hashlib
import random

CONTROL = "A"
LIBRARY = "B"


def assign_arm(key: str | None, holdout: float, *, rng: random.Random | None = None) -> str:
    if holdout <= 0.0:
        return LIBRARY
    if holdout >= 1.0:
        return CONTROL
    if key:
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        position = int.from_bytes(digest[:8], "big") / 2**64
    else:
        position = (rng or random).random()
    return CONTROL if position < holdout else LIBRARY
