"""Arguments of the fs tools: already schema-validated, so these only apply the catalog's
defaults and refuse a value of the wrong type with `invalid_arguments`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from herdr_mcp.errors import ToolError


def str_arg(args: Mapping[str, Any], name: str) -> str:
    """The string argument `name`."""
    value = args.get(name)
    if not isinstance(value, str):
        raise ToolError("invalid_arguments", f"{name} must be a string.", argument=name)
    return value


def opt_str_arg(args: Mapping[str, Any], name: str) -> str | None:
    """The string argument `name`, or None when it is missing or empty."""
    value = args.get(name)
    return None if value is None or value == "" else str_arg(args, name)


def int_arg(args: Mapping[str, Any], name: str, default: int) -> int:
    """The positive integer argument `name`, or `default` when it is missing."""
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolError("invalid_arguments", f"{name} must be a positive integer.", argument=name)
    return value


def bool_arg(args: Mapping[str, Any], name: str) -> bool:
    """The boolean argument `name`, false when it is missing."""
    value = args.get(name, False)
    if not isinstance(value, bool):
        raise ToolError("invalid_arguments", f"{name} must be true or false.", argument=name)
    return value
