"""The arms: "A" is served without the library (the holdout), "B" with it (the champion, when serve runs a
deployment), and, while a test runs, "C" with the challenger; "pin" is a request pinned to a version by an
admin (`x-tfgrpo-version`), which no test counts.

Sticky: a user's position in the holdout is a hash of the user key; among the library arm's users, who gets
the challenger is a second hash of the key salted with the challenger's content hash, so a user stays in C
for the whole test, and each new test draws its own users (the same ones are not the guinea pigs every time).

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
CHALLENGER = "C"
PINNED = "pin"


def sticky_key(*, identity: str | None, admin: bool, header: str | None, body_user: object) -> str | None:
    """The key the arm is a hash of. `identity`: the client key's sha256 (None: open mode)."""
    named = header or (body_user if isinstance(body_user, str) else None)
    if identity is None:
        return named
    if admin and named:
        return f"{identity}:{named}"  # the admin's own users, apart from any other key's
    return identity


def assign_arm(
    key: str | None,
    holdout: float,
    *,
    challenger: str | None = None,
    challenger_share: float = 0.0,
    rng: random.Random | None = None,
) -> str:
    """A, B or C. `challenger`: the content hash of the version under test (None: no test runs)."""
    if holdout >= 1.0 or (holdout > 0.0 and _position(key, "", rng) < holdout):
        return CONTROL
    if challenger is not None and challenger_share > 0.0 and _position(key, challenger, rng) < challenger_share:
        return CHALLENGER
    return LIBRARY


def _position(key: str | None, salt: str, rng: random.Random | None) -> float:
    """Where the key falls in [0, 1): a hash (sticky), or at random for a request with no key."""
    if not key:
        return (rng or random).random()
    digest = hashlib.sha256(f"{salt}:{key}".encode() if salt else key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
