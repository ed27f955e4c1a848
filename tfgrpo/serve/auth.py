"""Client API keys (`--client-keys FILE`): who may use the /v1/ routes, checked before a body is read.

The file holds one key per line, either the key itself or `sha256:HEX`, the sha256 of the key in hex (so
the file need not hold the secret); blank lines and `#` comments are skipped. Only hashes are kept in
memory, and a presented key is hashed before it is compared, so the check takes the same time whichever
key comes close. A client is named in the access log by the first 8 hex characters of its key's hash,
never by the key; its identity (the whole sha256 hex) is what owns its exchanges and picks its arm.

Admin keys (`--admin-keys FILE`, same format) are client keys the operator trusts further: one may rate any
exchange, and may spread the users it fronts over both arms with the user header (`arms.py`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tfgrpo.serve.errors import RequestRejected, ServeStartupError

HASHED = re.compile(r"sha256:([0-9a-fA-F]{64})")
#: a 401 comes before the body is read: the connection is closed, as its unread body cannot be skipped safely
UNAUTHORIZED = {"www-authenticate": "Bearer", "connection": "close"}


class ClientKeys:
    def __init__(self, digests: frozenset[str], admin_digests: frozenset[str] = frozenset()):
        self.digests = digests | admin_digests  # an admin key is a client key too
        self.admin_digests = admin_digests

    def with_admins(self, admins: ClientKeys) -> ClientKeys:
        return ClientKeys(self.digests, admins.digests)

    def is_admin(self, identity: str | None) -> bool:
        return identity is not None and identity in self.admin_digests

    @classmethod
    def load(cls, path: Path) -> ClientKeys:
        """The keys of `path`; ServeStartupError (one line, no key in it) when the file is unusable."""
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ServeStartupError(f"client_keys {path}: cannot read it ({type(exc).__name__})") from None
        digests = set()
        for number, line in enumerate(text.splitlines(), start=1):
            entry = line.split("#", 1)[0].strip()
            if not entry:
                continue
            if entry.lower().startswith("sha256:"):
                hashed = HASHED.fullmatch(entry)
                if hashed is None:
                    raise ServeStartupError(
                        f"client_keys {path} line {number}: sha256: must be followed by 64 hex digits"
                    )
                digests.add(hashed.group(1).lower())
            elif any(character.isspace() for character in entry):
                raise ServeStartupError(f"client_keys {path} line {number}: a key cannot contain spaces")
            else:
                digests.add(digest(entry))
        if not digests:
            raise ServeStartupError(f"client_keys {path}: no key in the file (one key or sha256:HEX per line)")
        return cls(frozenset(digests))

    def check(self, authorization: bytes | None) -> str:
        """The client's identity (its key's sha256, hex) for `Authorization: Bearer KEY`; 401 otherwise."""
        if not authorization:
            raise RequestRejected(
                401, "no API key: send Authorization: Bearer YOUR_KEY", "missing_api_key", headers=UNAUTHORIZED
            )
        scheme, _, key = authorization.decode("latin-1").strip().partition(" ")
        hashed = digest(key.strip()) if scheme.lower() == "bearer" and key.strip() else ""
        if hashed not in self.digests:
            raise RequestRejected(401, "incorrect API key provided", "invalid_api_key", headers=UNAUTHORIZED)
        return hashed


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()
