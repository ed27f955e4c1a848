"""Tool names → tool objects: `get_tools(["python"])`, or a user's tool as "package.module:ClassName"."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from tfgrpo.rollout.tools.base import Tool, ToolError
from tfgrpo.rollout.tools.python_sandbox import PythonTool
from tfgrpo.rollout.tools.web_search import WebSearchTool

ToolFactory = Callable[..., Tool]


BUILTIN_TOOLS: Mapping[str, ToolFactory] = MappingProxyType({"python": PythonTool, "web_search": WebSearchTool})


class ToolRegistry:
    """Named tool factories. Start from the built-ins and `register` your own."""

    def __init__(self, factories: Mapping[str, ToolFactory] | None = None):
        self._factories: dict[str, ToolFactory] = dict(BUILTIN_TOOLS if factories is None else factories)

    def register(self, name: str, factory: ToolFactory) -> None:
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def build(self, spec: str, **options: Any) -> Tool:
        """A registered name, or "module:Class" naming a `Tool` subclass (or factory) to import."""
        if spec in self._factories:
            tool = self._factories[spec](**options)
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
