"""Which settings are secret, how they are hidden and revealed, and what a URL may carry (and how it is shown)."""

from __future__ import annotations

import inspect
import json
import typing

import pytest
from pydantic import BaseModel, SecretStr, ValidationError

from tfgrpo import rewards
from tfgrpo.core.config import ConfigError, build_config, config_dict, dump_config, format_validation_error
from tfgrpo.core.secrets import (
    MASK,
    NOT_SECRET_NAMES,
    hide_secrets,
    is_secret_name,
    mask_url,
    masked,
    refuse_url_credentials,
    reveal_secrets,
    split_query,
    url_with_path,
)
from tfgrpo.eval.config import EvalConfig
from tfgrpo.eval.matrix import MatrixConfig
from tfgrpo.experiment.recipe import Recipe
from tfgrpo.learn.config import LearnConfig
from tfgrpo.llm.chat import ChatConfig
from tfgrpo.llm.config import LLMConfig
from tfgrpo.rollout.agent import AgentConfig
from tfgrpo.rollout.tools.base import ToolError
from tfgrpo.rollout.tools.python_sandbox import PythonSandboxConfig
from tfgrpo.rollout.tools.web_search import WebSearchConfig, WebSearchTool
from tfgrpo.serve.config import ServeConfig

SECRET_NAMES = ["api_key", "apiKey", "apikey", "APIKey", "x-api-key", "X-Api-Key", "access_token", "client_secret"]
SECRET_NAMES += ["password", "db_password", "Authorization", "auth", "key", "token", "subscription_key", "secret"]
# any name ending in key/token/secret/password, whoever's it is (issue 27: these four were read as plain)
SECRET_NAMES += ["bing_key", "serpapi_key", "search_key", "brave_key", "BingKey", "BRAVE-KEY", "serpapikey"]
SECRET_NAMES += ["session_token", "authtoken", "clientsecret", "dbpassword", "primary_key", "SESSION.TOKEN"]
PLAIN_NAMES = ["max_tokens", "title_key", "problem_key", "url_key", "auth_header", "auth_scheme", "token_budget"]
PLAIN_NAMES += ["trajectory_token_budget", "arm_key_header", "format", "region", "keyword", "monkey", "tokens"]
PLAIN_NAMES += ["answerKey", "ANSWER-KEY", "tests_key", "sort_key", "cacheKey", "key_column", "tokenizer"]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_names_that_say_credential(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_names_that_do_not(name):
    assert not is_secret_name(name)


def test_the_allowlist_is_small_and_only_names_that_would_otherwise_be_secret():
    # each entry is a column or lookup name ending in `key`: without the allowlist the rule would hide it
    assert len(NOT_SECRET_NAMES) <= 16 and all(name.endswith("_key") for name in NOT_SECRET_NAMES)
    assert not any(is_secret_name(name) for name in NOT_SECRET_NAMES)
    assert all(is_secret_name(name.replace("_key", "_x_key")) for name in NOT_SECRET_NAMES)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("http://user:sk-1@host/v1", "http://user:***@host/v1"),
        ("https://ghp_token@github.com/x", "https://***@github.com/x"),
        ("see http://u:p@ss@h:8/p?q=1 now", "see http://u:***@h:8/p?*** now"),  # a password holding '@'
        ("GET http://h/s?format=json&apiKey=k1&q=x HTTP/1.1", "GET http://h/s?*** HTTP/1.1"),
        (
            "https://fn.azurewebsites.net/api/v1?code=sk-1",
            "https://fn.azurewebsites.net/api/v1?***",
        ),  # Azure Functions
        ("https://a.blob.core.windows.net/c?sv=2022&sig=a%2Bb#frag", "https://a.blob.core.windows.net/c?***#frag"),
        ("http://h/v1?sk-abc123", "http://h/v1?***"),  # a bare token: no name to judge by
        ("http://h/v1?", "http://h/v1?"),
        ("mail me at a@b.org", "mail me at a@b.org"),
    ],
)
def test_mask_url_hides_userinfo_and_the_whole_query_string(text, shown):
    assert mask_url(text) == shown


def test_hidden_options_reveal_as_given_at_any_depth():
    options = {"format": "json", "apiKey": "k1", "nested": {"deeper": {"x-api-key": "k2", "n": 3}}, "auth": ["a", 7]}
    hidden = hide_secrets(options)
    assert isinstance(hidden["apiKey"], SecretStr) and isinstance(hidden["nested"]["deeper"]["x-api-key"], SecretStr)
    assert hidden["format"] == "json" and hidden["nested"]["deeper"]["n"] == 3
    assert all(isinstance(item, SecretStr) for item in hidden["auth"])  # everything under a secret name
    assert reveal_secrets(hidden) == {**options, "auth": ["a", "7"]}
    shown = {"format": "json", "apiKey": MASK, "nested": {"deeper": {"x-api-key": MASK, "n": 3}}, "auth": MASK}
    assert masked(hidden) == shown == masked(options)  # hidden by type, or by name where data is plain


def test_free_form_options_refuse_a_saved_mask_and_url_credentials():
    with pytest.raises(ValueError, match=r"nested\.token: holds '\*\*\*\*\*\*\*\*\*\*', the mask"):
        hide_secrets({"nested": {"token": MASK}})
    with pytest.raises(ValueError, match=r"http://u:\*\*\*@h/x: a URL may not carry credentials"):
        hide_secrets({"mirror": "http://u:pw-1@h/x"})
    assert refuse_url_credentials("http://127.0.0.1:8080/v1") == "http://127.0.0.1:8080/v1"


def test_config_dump_masks_every_kind_and_never_echoes_a_key_in_errors():
    agent = {
        "tools": ["web_search"],
        "tool_options": {"web_search": {"endpoint": "http://h/s", "api_key": "tk-1", "extra_params": {"key": "xk-1"}}},
    }
    config = build_config(LearnConfig, None, {"data": "easy", "llm": {"api_key": "sk-1"}, "agent": agent})
    text = dump_config(config)
    assert not any(secret in text for secret in ("sk-1", "tk-1", "xk-1")) and text.count(MASK) == 3
    assert config_dict(config)["agent"]["tool_options"]["web_search"]["extra_params"] == {"key": MASK}
    assert "tk-1" not in repr(config) and "xk-1" not in str(config.agent)
    (web_search,) = config.agent.build().tools
    assert web_search.config.api_key.get_secret_value() == "tk-1"
    assert reveal_secrets(web_search.config.extra_params) == {"key": "xk-1"}

    with pytest.raises(ConfigError) as error:
        build_config(LearnConfig, None, {"data": "easy", "llm": {"api_key": ["sk-in-a-list"]}})
    assert "sk-in-a-list" not in str(error.value) and MASK in str(error.value)


#: every setting that takes a URL, as (how to build it from one URL, where the built settings hold it)
URL_SETTINGS = [
    (lambda url: LLMConfig(base_url=url), lambda config: config.base_url[0]),
    (lambda url: LLMConfig(base_url=["http://127.0.0.1:1/v1", url]), lambda config: config.base_url[1]),
    (lambda url: ServeConfig(library="lib.json", upstream=[url]), lambda config: config.upstream[0]),
    (lambda url: WebSearchConfig(endpoint=url), lambda config: config.endpoint),
    (
        lambda url: AgentConfig(tools=["pkg.mod:Tool"], tool_options={"pkg.mod:Tool": {"mirror": url}}),
        lambda config: config.tool_options["pkg.mod:Tool"]["mirror"],
    ),
]


@pytest.mark.parametrize(("build", "_held"), URL_SETTINGS)
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://user:pw-9@127.0.0.1:8000/v1", "may not carry credentials"),
        ("http://127.0.0.1:8000/v1?***", "query string is the mask a saved config.yaml writes"),
    ],
)
def test_userinfo_or_a_masked_query_is_refused_in_one_line_that_hides_them(build, _held, url, says):
    with pytest.raises(ValidationError) as error:
        build(url)
    message = format_validation_error(error.value)
    assert "pw-9" not in message and says in message and len(message.splitlines()) == 1


@pytest.mark.parametrize(("build", "held"), URL_SETTINGS)
@pytest.mark.parametrize("query", ["code=fk-9", "sv=2022&sig=pw%2B9", "sk-pw9", "api_key=pw-9"])
def test_a_query_string_is_kept_for_sending_and_shown_masked(build, held, query):
    """Azure Functions keys and SAS signatures authenticate by the query string: used, never shown
    (before issue 43 only a secret-named parameter was caught, and refused)."""
    url = f"http://127.0.0.1:8000/v1?{query}"
    config = build(url)
    assert held(config) == url
    shown = json.dumps(masked(config.model_dump(mode="json")))
    assert query not in shown and "http://127.0.0.1:8000/v1?***" in shown


def test_a_request_url_keeps_the_query_after_its_path():
    assert url_with_path("http://h/v1/?code=c%2B1", "/chat/completions") == "http://h/v1/chat/completions?code=c%2B1"
    assert url_with_path("http://h/v1", "/models") == "http://h/v1/models"
    assert split_query("https://fn.net/api/v1?code=c%2B1&sk-2") == (
        "https://fn.net/api/v1",
        {"code": "c+1", "sk-2": ""},
    )


def test_base_urls_differing_only_in_their_query_are_refused_and_litellm_takes_none():
    with pytest.raises(ValidationError, match=r"http://h/v1\?\*\*\*: two base URLs differ only"):
        LLMConfig(base_url=["http://h/v1?code=a", "http://h/v1?code=b"])
    with pytest.raises(ValidationError, match="the litellm backend cannot send a base URL's query string") as error:
        LLMConfig(backend="litellm", model="openai/m", base_url="http://h/v1?code=pw-9")
    assert "pw-9" not in format_validation_error(error.value)


def test_web_search_endpoint_with_credentials_is_a_tool_error():
    with pytest.raises(ToolError, match="may not carry credentials") as error:
        WebSearchTool(endpoint="http://u:pw-9@127.0.0.1/search")
    assert "pw-9" not in str(error.value)


def _models(model: type[BaseModel], seen: set[type]) -> typing.Iterator[tuple[str, typing.Any]]:
    """(qualified field name, annotation) of every field of `model` and of the models it nests."""
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        yield f"{model.__name__}.{name}", field.annotation
        for kind in _leaf_types(field.annotation):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                yield from _models(kind, seen)


def _leaf_types(annotation: typing.Any) -> set[typing.Any]:
    args = typing.get_args(annotation)
    return set().union(*(_leaf_types(arg) for arg in args)) if args else {annotation}


def test_every_setting_named_like_a_secret_is_typed_as_one():
    # The name-based mask of a written config must never hit a plain setting (resume compares them).
    seen: set[type] = set()
    roots = (LearnConfig, EvalConfig, ServeConfig, ChatConfig, MatrixConfig, Recipe, WebSearchConfig)
    roots += (PythonSandboxConfig,)
    fields = [item for root in roots for item in _models(root, seen)]
    named = {name: annotation for name, annotation in fields if is_secret_name(name.rsplit(".", 1)[1])}
    assert named and all(SecretStr in _leaf_types(annotation) for annotation in named.values()), named


REWARD_CLASSES = [getattr(rewards, name) for name in rewards.__all__ if name.endswith("Reward") and name != "Reward"]


def test_no_reward_parameter_is_named_like_a_secret():
    # reward parameters reach written settings (a recipe's, `-p KEY=VALUE`): a column name must stay readable
    names = {name for reward in REWARD_CLASSES for name in inspect.signature(reward).parameters}
    assert {"answer_key", "tests_key", "options_key"} <= names
    assert [name for name in names if is_secret_name(name)] == []
