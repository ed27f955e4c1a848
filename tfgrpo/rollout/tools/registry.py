"""Tool names → tool objects: `get_tools(["python"])`, or a user's tool as "package.module:ClassName"."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from tfgrpo.rollout.tools.base import Tool, ToolError

ToolFactory = Callable[..., Tool]

_BUILTIN_SPECS = MappingProxyType(
    {
        "python": "tfgrpo.rollout.tools.python_sandbox:PythonTool",
        "web_search": "tfgrpo.rollout.tools.web_search:WebSearchTool",
    }
)


class _BuiltinTools(Mapping[str, ToolFactory]):
    """The built-in tools by name. A tool's module is imported when its factory is first asked for, so a run
    without tools (and every check of tool names) never imports the sandbox (~40 ms of start-up)."""

    def __getitem__(self, name: str) -> ToolFactory:
        return _import_factory(_BUILTIN_SPECS[name])

    def __contains__(self, name: object) -> bool:  # a name check imports nothing
        return name in _BUILTIN_SPECS

    def __iter__(self) -> Iterator[str]:
        return iter(_BUILTIN_SPECS)

    def __len__(self) -> int:
        return len(_BUILTIN_SPECS)


BUILTIN_TOOLS: Mapping[str, ToolFactory] = _BuiltinTools()


class ToolRegistry:
    """Named tool factories. Start from the built-ins and `register` your own."""

    def __init__(self, factories: Mapping[str, ToolFactory] | None = None):
        self._builtin: Mapping[str, ToolFactory] = BUILTIN_TOOLS if factories is None else {}
        self._registered: dict[str, ToolFactory] = dict(factories or {})

    def register(self, name: str, factory: ToolFactory) -> None:
        self._registered[name] = factory

    def names(self) -> list[str]:
        return sorted({*self._builtin, *self._registered})

    def build(self, spec: str, **options: Any) -> Tool:
        """A registered name, or "module:Class" naming a `Tool` subclass (or factory) to import."""
        if spec in self._registered:
            tool = self._registered[spec](**options)
        elif spec in self._builtin:
            tool = self._builtin[spec](**options)
        elif ":" in spec:
            tool = _import_factory(spec)(**options)
        else:
            raise ToolError(
                f"unknown tool '{spec}'; available: {', '.join(self.names())} "
                "(or 'package.module:ClassName' for your own)"
            )
        if not isinstance(tool, Tool):
            raise ToolError(f"tool '{spec}' built a {type(tool).__name__}, not a tfgrpo.rollout.tools.Tool")
        return tool


def _import_factory(spec: str) -> ToolFactory:
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolError(f"tool '{spec}': cannot import module '{module_name}': {exc}") from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ToolError(f"tool '{spec}': module '{module_name}' has no callable '{attribute}'")
    return factory


def parse_tool_names(names: str | Iterable[str] | None) -> list[str]:
    """ "python,web_search" or ["python", "web_search"] → unique names in order ("none" / empty = no tools)."""
    if names is None:
        return []
    items = names.split(",") if isinstance(names, str) else [part for name in names for part in name.split(",")]
    unique: list[str] = []
    for item in (item.strip() for item in items):
        if item and item.lower() != "none" and item not in unique:
            unique.append(item)
    return unique


def get_tools(
    names: str | Iterable[str] | None,
    *,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    registry: ToolRegistry | None = None,
) -> list[Tool]:
    """Build the named tools; `options[name]` are keyword arguments of that tool (e.g. limits)."""
    registry = registry or ToolRegistry()
    options = options or {}
    unknown_options = set(options) - set(parse_tool_names(names))
    if unknown_options:
        raise ToolError(f"options given for tool(s) not enabled: {', '.join(sorted(unknown_options))}")
    tools = [registry.build(name, **dict(options.get(name, {}))) for name in parse_tool_names(names)]
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise ToolError(f"two tools are both named '{tool.name}'")
        seen.add(tool.name)
    return tools
