"""A web-search tool over a search API you supply (endpoint URL + key); no provider is built in.

The request is `GET endpoint?{query_param}=...&{count_param}=N` with the key in a header; the reply is
JSON whose list of hits sits at `results_path` (dotted), each hit a mapping with title/url/snippet
fields named by `title_key`/`url_key`/`snippet_key`. The defaults fit a SearxNG-style
`{"results": [{"title", "url", "content"}]}`; for Brave Search set `results_path: web.results`,
`snippet_key: description`, `auth_header: X-Subscription-Token`, `auth_scheme: ""`.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError

from tfgrpo.core.config import format_validation_error
from tfgrpo.core.secrets import (
    CredentialFreeUrl,
    SecretKey,
    hide_secrets,
    mask_url,
    mask_urls_logged_by,
    reveal_secrets,
    split_query,
)
from tfgrpo.rollout.tools.base import Tool, ToolError, ToolResult


class WebSearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    endpoint: CredentialFreeUrl = Field(
        ..., description="Search API URL, e.g. http://localhost:8888/search (no credentials in it: use api_key)."
    )
    api_key: SecretKey = Field(None, description="Sent in `auth_header`; None = no auth header.")
    auth_header: str = Field("Authorization", description="Header carrying the key.")
    auth_scheme: str = Field("Bearer", description="Prefix of the key in the header ('' for a bare key).")
    query_param: str = Field("q", description="Query-string parameter of the search terms.")
    count_param: str | None = Field(
        "count", description="Query-string parameter of the result count (None: not sent)."
    )
    extra_params: Annotated[dict[str, str | SecretStr], AfterValidator(hide_secrets)] = Field(
        default_factory=dict,
        description="Fixed extra query parameters (e.g. format=json); a secret-named one (key, apiKey, token) is "
        "sent as given and written masked.",
    )
    results_path: str = Field("results", description="Dotted path of the hit list in the JSON reply.")
    title_key: str = "title"
    url_key: str = "url"
    snippet_key: str = "content"
    max_results: int = Field(5, ge=1, le=50)
    timeout_s: float = Field(15.0, gt=0)
    max_output_chars: int = Field(4000, ge=100)


class WebSearchTool(Tool):
    name: ClassVar[str] = "web_search"
    description: ClassVar[str] = "Search the web and return the top results (title, URL and snippet of each)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to search for."}},
        "required": ["query"],
    }

    def __init__(self, config: WebSearchConfig | None = None, **options: Any):
        try:
            self.config = config or WebSearchConfig(**options)
        except ValidationError as exc:
            raise ToolError(f"web_search tool: {format_validation_error(exc, source='options')}") from None
        # httpx logs each request's URL at INFO: a key among extra_params travels in it, so those lines hide it.
        mask_urls_logged_by("httpx")

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        import httpx

        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolResult(error="web_search needs a non-empty string argument 'query'")
        config = self.config
        # httpx replaces a URL's query string with `params`: the endpoint's own (a key, a SAS signature) joins them
        endpoint, endpoint_query = split_query(config.endpoint)
        params = {**endpoint_query, **reveal_secrets(config.extra_params), config.query_param: query}
        if config.count_param:
            params[config.count_param] = str(config.max_results)
        headers = {"Accept": "application/json"}
        if config.api_key:
            headers[config.auth_header] = f"{config.auth_scheme} {config.api_key.get_secret_value()}".strip()
        started = time.monotonic()
        try:
            async with httpx.AsyncClient(timeout=config.timeout_s) as http:
                response = await http.get(endpoint, params=params, headers=headers)
            response.raise_for_status()
            payload = response.json()
        except httpx.HTTPStatusError as exc:
            return ToolResult(
                error=f"search failed: HTTP {exc.response.status_code}", elapsed_s=time.monotonic() - started
            )
        except (httpx.HTTPError, ValueError) as exc:  # ValueError: a body that is not JSON
            return ToolResult(
                error=f"search failed: {type(exc).__name__}: {mask_url(str(exc))}",
                elapsed_s=time.monotonic() - started,
            )
        hits = _dig(payload, config.results_path)
        if not isinstance(hits, list):
            return ToolResult(
                error=f"search reply has no list at '{config.results_path}'", elapsed_s=time.monotonic() - started
            )
        text = self.format_hits(hits[: config.max_results])
        truncated = len(text) > config.max_output_chars
        return ToolResult(
            output=text[: config.max_output_chars], truncated=truncated, elapsed_s=time.monotonic() - started
        )

    def format_hits(self, hits: list[Any]) -> str:
        if not hits:
            return "No results."
        lines = []
        for rank, hit in enumerate(hits, 1):
            hit = hit if isinstance(hit, dict) else {}
            title = str(hit.get(self.config.title_key, "")).strip()
            url = str(hit.get(self.config.url_key, "")).strip()
            snippet = " ".join(str(hit.get(self.config.snippet_key, "")).split())
            lines.append(f"[{rank}] {title}\n{url}\n{snippet}".rstrip())
        return "\n\n".join(lines)


def _dig(payload: Any, dotted: str) -> Any:
    for key in dotted.split(".") if dotted else []:
        if not isinstance(payload, dict):
            return None
        payload = payload.get(key)
    return payload
