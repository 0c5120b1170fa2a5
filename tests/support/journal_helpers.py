"""Calling the continuity, Work Memory and handoff methods as the runtime does, for tests."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from herdr_mcp.errors import ToolError
from herdr_mcp.runtime.tools.continuity_methods import CONTINUITY_METHODS
from herdr_mcp.state.store import StateStore

METHODS = {spec.name: spec for spec in CONTINUITY_METHODS}


def call(store: StateStore, name: str, **params: Any) -> dict[str, Any]:
    """Run a method as the runtime does: params checked against its schema first."""
    spec = METHODS[name]
    Draft202012Validator(spec.params_schema).validate(params)
    return spec.run(store, params)


def refused(store: StateStore, name: str, **params: Any) -> ToolError:
    """The ToolError a call raises (the test fails when it does not raise)."""
    with pytest.raises(ToolError) as caught:
        call(store, name, **params)
    return caught.value
