"""The A/B split: arm "A" is served without the library (the holdout), arm "B" with it.

Sticky: the arm is a hash of the request's user key (`sticky_key`), so one user stays in one arm across
requests and server restarts. A request with no key is assigned at random (it cannot be kept sticky).

Who chooses the arm: the user key comes from what the server trusts. With client keys on, it is the
client key's identity: a client cannot move to the other arm by sending another `x-tfgrpo-user`, since
the server echoes the arm (`x-tfgrpo-arm`), so any header a client may vary it could simply try until it
lands where it wants. Only an admin key (a backend the operator trusts to name its own users) spreads
its users over both arms with the header, scoped to that key. Without client keys (open mode) the server
trusts nothing about the caller, so the header (else the body's `user`) is used as sent: sticky for an
honest client, choosable by a hostile one (docs/security.md).
"""

from __future__ import annotations

import hashlib
import random

CONTROL = "A"
LIBRARY = "B"


def sticky_key(*, identity: str | None, admin: bool, header: str | None, body_user: object) -> str | None:
    """The key the arm is a hash of. `identity`: the client key's sha256 (None: open mode)."""
    named = header or (body_user if isinstance(body_user, str) else None)
    if identity is None:
        return named
    if admin and named:
        return f"{identity}:{named}"  # the admin's own users, apart from any other key's
    return identity


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
