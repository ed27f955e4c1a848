"""Tools a model may call during multi-turn rollouts (see docs/agent.md)."""

from tfgrpo.rollout.tools.base import Tool, ToolError, ToolResult
from tfgrpo.rollout.tools.registry import BUILTIN_TOOLS, ToolRegistry, get_tools, parse_tool_names

__all__ = ["BUILTIN_TOOLS", "Tool", "ToolError", "ToolRegistry", "ToolResult", "get_tools", "parse_tool_names"]
