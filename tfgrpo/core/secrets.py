"""Credentials in settings: which values are secret, how they are hidden, and what a URL may carry.

A typed field says it by its type: `SecretKey` (a pydantic `SecretStr`) is never printed, dumped or logged
in clear. A free-form mapping (a tool's options, a search API's extra query parameters) has no types, so
there the entry's *name* decides, at any depth: `SecretOptions` turns every secret-named value into a
`SecretStr` when the config is validated, and the code that uses the options asks `reveal_secrets` for
the clear values. `masked` is the one view of any settings that may be written (config.yaml, metrics.json,
error messages): secrets as `MASK`, URL credentials as `***`.

A URL's credentials are its userinfo (`http://user:pass@host`) and its whole query string (`?code=...`,
`?sig=...`, `?sk-...`: Azure Functions keys, SAS signatures, a search API's key; no name rule can tell a
credential from a harmless parameter there). Userinfo is refused where settings are read
(`CredentialFreeUrl`, and every string in a `SecretOptions` mapping): used, it would send HTTP Basic auth in
the same `Authorization` header as the API key (aiohttp refuses the pair; the request failed as a malformed
reply, retried six times). A query string is kept and sent, since for those services it *is* the
authentication, but it is shown only as `?***`: `mask_url` is the one view of a URL that any file, log
line, trace or message gets, `mask_urls_logged_by` applies it to a library's log lines (httpx logs every
request URL), and `url_with_path` / `split_query` build the clear request URL. A masked query read back
from a saved config.yaml is refused, as a masked secret is, rather than sent as `***`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import AfterValidator, BeforeValidator, SecretStr

#: what a hidden value is written as (pydantic's own display of a SecretStr)
MASK = "**********"

#: words that make any name secret, wherever they stand (`client_secret`, `password_file`, `apikey`)
_SECRET_WORDS = frozenset({"apikey", "credential", "credentials", "passphrase", "passwd", "password", "secret"})
#: words that make a name secret as its last word (`bing_key`, `access_token`, `x-auth`), not before
#: (`token_budget`, `keyword`)
_SECRET_LAST_WORDS = frozenset({"auth", "authorization", "bearer", "cookie", "key", "pwd", "token"})
#: endings that make a name secret even where nothing separates them (`serpapikey`, `authtoken`, `dbpassword`)
_SECRET_ENDINGS = ("apikey", "passwd", "password", "secret", "token")
#: names that end in `key` but name a dataset column or a lookup, not a credential: the project's own settings
#: (`answer_key`, web_search's `title_key` ...) plus `sort_key` and `cache_key`; compared without case or separators
NOT_SECRET_NAMES = frozenset(
    {"answer_key", "cache_key", "completion_key", "group_key", "id_key", "options_key", "problem_key"}
    | {"prompt_key", "question_key", "snippet_key", "sort_key", "tests_key", "title_key", "url_key"}
)
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_NOT_SECRET = frozenset("".join(_WORD.findall(name)).lower() for name in NOT_SECRET_NAMES)
#: a URL in running text: a log line, an error message, a config value
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>]+")
#: scheme://USERINFO@ - greedy up to the authority's last '@', so a password holding '@' is hidden whole
_USERINFO = re.compile(r"^(?P<scheme>[^:]+://)(?P<userinfo>[^/?#]*)@")
#: a URL's query string: '?' up to the fragment or the URL's end (all of it is a credential, see above)
_QUERY = re.compile(r"\?[^#]*")
#: what a URL's query string is shown as
QUERY_MASK = "?***"


def is_secret_name(name: str) -> bool:
    """Whether a free-form entry's name says it holds a credential, case- and separator-insensitively: any
    name ending in key, apikey, token, secret or password (api_key, apiKey, x-api-key, bing_key, serpapikey,
    access_token, client_secret, db_password), or holding a word such as password or credential, or ending in
    auth, Authorization, cookie. Not: max_tokens, keyword, token_budget, auth_header, or a `NOT_SECRET_NAMES`
    column name such as title_key."""
    words = [word.lower() for word in _WORD.findall(name)]
    joined = "".join(words)
    if not words or joined in _NOT_SECRET:
        return False
    return (
        bool(_SECRET_WORDS.intersection(words)) or words[-1] in _SECRET_LAST_WORDS or joined.endswith(_SECRET_ENDINGS)
    )


def is_mask(value: object) -> bool:
    """A value a saved config.yaml holds in place of a secret ('**********', or '***' from older runs)."""
    return isinstance(value, str) and bool(value) and set(value) == {"*"}


def mask_url(text: str) -> str:
    """`text` with the credentials of every URL in it hidden: `http://user:***@host`, `http://***@host`, and
    the whole query string as `?***` (`https://fn.azurewebsites.net/api/v1?***`)."""
    return _URL.sub(lambda match: _mask_one_url(match[0]), text)


def _mask_one_url(url: str) -> str:
    def hide_userinfo(match: re.Match[str]) -> str:
        user, colon, _ = match["userinfo"].partition(":")
        return f"{match['scheme']}{user}:***@" if colon else f"{match['scheme']}***@"

    return _QUERY.sub(lambda query: QUERY_MASK if len(query[0]) > 1 else query[0], _USERINFO.sub(hide_userinfo, url))


def refuse_url_credentials(url: str) -> str:
    """`url` (a URL, or text holding URLs) itself, or a ValueError naming it masked when a URL in it carries
    userinfo or a masked query string."""
    found = [match[0] for match in _URL.finditer(url)]
    if any(_USERINFO.match(each) for each in found):
        raise ValueError(
            f"{mask_url(url)}: a URL may not carry credentials as user:password@ (they would clash with the API "
            "key's Authorization header); pass the key as api_key (a search API's query key: in extra_params)"
        )
    if any(urlsplit(each).query == QUERY_MASK[1:] for each in found):
        # A saved config.yaml shows the query string masked: sending '***' would fail, or worse, silently.
        raise ValueError(
            f"{url}: its query string is the mask a saved config.yaml writes in place of it; give the URL itself "
            "(to resume a run: --base-url, or --config with your own file)"
        )
    return url


def url_with_path(url: str, path: str) -> str:
    """The clear URL of `path` under a base URL that may carry a query string: `http://h/v1?code=c` and
    `/chat/completions` make `http://h/v1/chat/completions?code=c` (`url + path` would put the path into
    the query)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))


def split_query(url: str) -> tuple[str, dict[str, str]]:
    """A base URL without its query string, and the query's parameters (a bare `?token` as `{"token": ""}`),
    for a client that adds its own path and takes the query as parameters (the openai SDK's default_query)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="")), dict(parse_qsl(parts.query, keep_blank_values=True))


class MaskUrlsInLogs(logging.Filter):
    """Hides URL credentials in the records of a library that logs request URLs (httpx: each one, at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = mask_url(message)
        if hidden != message:
            record.msg, record.args = hidden, ()
        return True


def mask_urls_logged_by(logger_name: str) -> None:
    """Install `MaskUrlsInLogs` on a library's logger, once (idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(existing, MaskUrlsInLogs) for existing in logger.filters):
        logger.addFilter(MaskUrlsInLogs())


def masked(value: Any) -> Any:
    """A copy of settings (JSON-like data) safe to write: secrets, and secret-named entries, as MASK; URLs
    with their credentials hidden. None stays None, so "no key given" still reads as such."""
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, Mapping):
        return {
            key: (MASK if item is not None and is_secret_name(str(key)) else masked(item))
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [masked(item) for item in value]
    if isinstance(value, str):
        return mask_url(value)
    return value


def hide_secrets(options: dict[str, Any]) -> dict[str, Any]:
    """Free-form options with every secret-named value (any depth) a SecretStr; URL userinfo refused."""
    return _hide(options, secret=False, where="")


def _hide(value: Any, *, secret: bool, where: str) -> Any:
    if isinstance(value, SecretStr):
        return value
    if isinstance(value, Mapping):
        return {
            key: _hide(item, secret=secret or is_secret_name(str(key)), where=f"{where}.{key}".lstrip("."))
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_hide(item, secret=secret, where=f"{where}[{index}]") for index, item in enumerate(value)]
    if secret and is_mask(value):
        # A saved config.yaml holds the mask: running with it would send '***' as the key, silently.
        raise ValueError(
            f"{where}: holds {value!r}, the mask a saved config.yaml writes in place of a secret; give the secret "
            "itself (to resume a run: --config with your own file)"
        )
    if secret and isinstance(value, str | int | float) and not isinstance(value, bool):
        return SecretStr(str(value))
    if isinstance(value, str):
        refuse_url_credentials(value)
    return value


def reveal_secrets(value: Any) -> Any:
    """The clear values of hidden options, for the code that sends them (a tool's constructor, a request)."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, Mapping):
        return {key: reveal_secrets(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [reveal_secrets(item) for item in value]
    return value


def _mask_is_unset(value: Any) -> Any:
    # A saved config.yaml holds the key masked: reading it back must mean "no key given here", so
    # --api-key or the environment supplies it.
    return None if is_mask(value) else value


def secret_value(secret: SecretStr | None) -> str | None:
    """The clear text of a `SecretKey` field, or None when none was given."""
    return None if secret is None else secret.get_secret_value()


SecretKey = Annotated[SecretStr | None, BeforeValidator(_mask_is_unset)]
"""An API key or token: never printed, dumped or logged in clear; read it with `.get_secret_value()`."""

SecretOptions = Annotated[dict[str, Any], AfterValidator(hide_secrets)]
"""Free-form options (any depth): secret-named values become SecretStr, URLs with userinfo are refused."""

CredentialFreeUrl = Annotated[str, AfterValidator(refuse_url_credentials)]
"""A URL without `user:password@` and without a masked query string (see the module docstring)."""

__all__ = [
    "MASK",
    "QUERY_MASK",
    "NOT_SECRET_NAMES",
    "CredentialFreeUrl",
    "MaskUrlsInLogs",
    "SecretKey",
    "SecretOptions",
    "hide_secrets",
    "is_mask",
    "is_secret_name",
    "mask_url",
    "mask_urls_logged_by",
    "masked",
    "refuse_url_credentials",
    "reveal_secrets",
    "secret_value",
    "split_query",
    "url_with_path",
]
