"""Herdr's public ids: workspaces `w<n>`, tabs `<ws>:t<n>`, panes `<ws>:p<n>`, terminals `term_<hex>`.

Numbers are bijective base 32 over Herdr's alphabet (the 10th workspace is `wA`), allocated from
counters and never reused. Herdr: src/workspace.rs (PUBLIC_ID_ALPHABET, encode_public_number,
generate_workspace_id, public_tab_id_for_number, public_pane_id_for_number); src/terminal/id.rs
(TerminalId::alloc: `term_` + microseconds and a counter in hex).
"""

from __future__ import annotations

import itertools
import time

PUBLIC_ID_ALPHABET = "123456789ABCDEFGHJKMNPQRSTVWXYZ0"

_terminal_counter = itertools.count(1)


def encode_public_number(value: int) -> str:
    if value == 0:
        return "0"
    digits = []
    while value > 0:
        value, digit = divmod(value - 1, len(PUBLIC_ID_ALPHABET))
        digits.append(PUBLIC_ID_ALPHABET[digit])
    return "".join(reversed(digits))


def decode_public_number(text: str) -> int | None:
    value = 0
    for char in text:
        digit = PUBLIC_ID_ALPHABET.find(char)
        if digit < 0:
            return None
        value = value * len(PUBLIC_ID_ALPHABET) + digit + 1
    return value if text else None


def workspace_id_for(number: int) -> str:
    return f"w{encode_public_number(number)}"


def tab_id_for(workspace_id: str, number: int) -> str:
    return f"{workspace_id}:t{encode_public_number(number)}"


def pane_id_for(workspace_id: str, number: int) -> str:
    return f"{workspace_id}:p{encode_public_number(number)}"


def new_terminal_id() -> str:
    micros = time.time_ns() // 1000
    return f"term_{micros:x}{next(_terminal_counter):x}"
