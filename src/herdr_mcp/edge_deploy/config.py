"""The Edge's wrangler configuration: the committed edge/wrangler.jsonc read as it is, and the
effective configuration a deploy hands wrangler (`--config`), written under the config dir.

The effective configuration is the committed one with only what belongs to this deployment
changed: the Worker `name`, the OAUTH_KV namespace `id` (the committed file holds zeros), an
absolute `main` (the file lives outside edge/), and no `$schema` (a path relative to edge/).
Everything else (Durable Object bindings and the migration list, the rate limit, the
compatibility date and flags) is the committed file's, so a deploy never edits the sources.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from herdr_mcp.edge_deploy.wrangler import EdgeDeployUsage
from herdr_mcp.records import atomic_write
from herdr_mcp.strict_json import unique_keys

KV_BINDING = "OAUTH_KV"
#: The id the committed file carries until someone puts theirs in (edge/README.md, step 3).
PLACEHOLDER_KV_ID = "0" * 32
DEFAULT_WORKER = "herdr-mcp-edge"


def strip_comments(text: str) -> str:
    """`text` without its `//` and `/* */` comments (JSONC), strings left as they are."""
    out: list[str] = []
    index, length = 0, len(text)
    in_string = False
    while index < length:
        char = text[index]
        if in_string:
            out.append(char)
            if char == "\\" and index + 1 < length:
                out.append(text[index + 1])
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
            out.append(char)
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = length if end == -1 else end
            continue
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            if end == -1:
                raise ValueError("an unterminated /* comment")
            index = end + 2
            continue
        else:
            out.append(char)
        index += 1
    return "".join(out)


def committed_config(edge_dir: Path) -> dict[str, Any]:
    """edge/wrangler.jsonc as a JSON object; raises EdgeDeployUsage."""
    path = edge_dir / "wrangler.jsonc"
    try:
        document = json.loads(strip_comments(path.read_text()), object_pairs_hook=unique_keys)
    except (OSError, ValueError) as exc:
        raise EdgeDeployUsage("edge_config_invalid", f"{path} is not readable JSONC: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("main"), str):
        raise EdgeDeployUsage("edge_config_invalid", f"{path} is not a wrangler configuration with a main")
    kv_binding(document)
    return document


def kv_binding(config: dict[str, Any]) -> dict[str, Any]:
    """The OAUTH_KV entry of `config`'s kv_namespaces; raises EdgeDeployUsage."""
    for entry in config.get("kv_namespaces") or []:
        if isinstance(entry, dict) and entry.get("binding") == KV_BINDING:
            return entry
    raise EdgeDeployUsage("edge_config_invalid", f"wrangler.jsonc has no {KV_BINDING} KV namespace binding")


def committed_kv_id(config: dict[str, Any]) -> str | None:
    """The KV id the committed file names, unless it is the placeholder."""
    value = kv_binding(config).get("id")
    return value if isinstance(value, str) and value and value != PLACEHOLDER_KV_ID else None


def effective_config(edge_dir: Path, config: dict[str, Any], worker: str, kv_id: str) -> dict[str, Any]:
    """The configuration this deployment runs wrangler with (see the module docstring)."""
    document: dict[str, Any] = json.loads(json.dumps(config))
    document.pop("$schema", None)
    document["name"] = worker
    document["main"] = str((edge_dir / config["main"]).resolve())
    kv_binding(document)["id"] = kv_id
    return document


def write_config(path: Path, document: dict[str, Any]) -> None:
    """Write the effective configuration (no secret in it; 0600 like every file here)."""
    atomic_write(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode())


def durable_object_classes(config: dict[str, Any]) -> list[str]:
    bindings = (config.get("durable_objects") or {}).get("bindings") or []
    return [b["class_name"] for b in bindings if isinstance(b, dict) and isinstance(b.get("class_name"), str)]


def migration_tags(config: dict[str, Any]) -> list[str]:
    return [
        m["tag"]
        for m in config.get("migrations") or []
        if isinstance(m, dict) and isinstance(m.get("tag"), str)
    ]
