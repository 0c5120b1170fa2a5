"""`herdr_mcp.text.safe_json`, the backstop every answer goes through: a value with nothing to
clean comes back as it is (one json.dumps tells), anything else is walked as before: lone
surrogates in keys and values, a name's undecodable byte shown `\\xNN`, values json cannot dump,
nesting past json's recursion limit."""

from __future__ import annotations

import os
from typing import Any

from herdr_mcp.text import REPLACEMENT, safe_json


def test_a_clean_value_is_returned_as_it_is() -> None:
    value = {
        "entries": [{"path": f"d/f{index}", "size": index, "ok": True} for index in range(500)],
        "é": "日本",
    }
    assert safe_json(value) is value


def test_surrogates_are_cleaned_in_keys_and_values_and_the_rest_kept() -> None:
    name = os.fsdecode(b"caf\xff")
    value: dict[str, Any] = {"a": [1, {"path": name, "\ud800key": "x\udfffy"}], "b": "kept"}
    assert safe_json(value) == {
        "a": [1, {"path": "caf\\xff", f"{REPLACEMENT}key": f"x{REPLACEMENT}y"}],
        "b": "kept",
    }
    assert value["a"][1]["path"] == name  # the input is not changed


def test_values_json_cannot_dump_or_nested_too_deep_are_walked() -> None:
    odd = {"set": {1, 2}, "text": "\udcff"}
    cleaned = safe_json(odd)
    assert cleaned["set"] == {1, 2} and cleaned["text"] == "\\xff"
    deep: Any = "\ud800"
    for _ in range(5000):
        deep = [deep]
    walked = safe_json(deep)
    for _ in range(5000):
        walked = walked[0]
    assert walked == REPLACEMENT
