"""The stable identities of continuity chains: a site's conversation (from its id or its full
URL), a site's project, and a Herdr workspace.

A conversation or project journals into exactly one chain; a workspace may serve several.
Identities are tried most specific first (conversation, project, workspace); the first that
matches anything decides (`narrow`).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from herdr_mcp.errors import ToolError

SITES = ("chatgpt", "zai", "deepseek")
#: The `site` of a workspace binding: a Herdr workspace belongs to no Web site.
WORKSPACE_SITE = "herdr"

_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_CHATGPT_PROJECT = re.compile(r"^(g-p-[0-9a-f]+)(?:-.*)?$")
_HOST_SITES = {
    "chatgpt.com": "chatgpt",
    "chat.openai.com": "chatgpt",
    "chat.z.ai": "zai",
    "chat.deepseek.com": "deepseek",
}


@dataclass(frozen=True)
class WebLocation:
    """What a full conversation URL says: the site, and the conversation and/or project."""

    site: str
    conversation_id: str | None
    project_id: str | None


def parse_conversation_url(url: str) -> WebLocation:
    """The site, conversation and project named by a full Web conversation URL.

    Known forms: ChatGPT `https://chatgpt.com/c/<id>`, `/g/<project>/c/<id>` and
    `/g/<project>/project` (a project id `g-p-<hex>` keeps only that prefix, dropping the name
    slug ChatGPT appends); z.ai `https://chat.z.ai/c/<id>`; DeepSeek
    `https://chat.deepseek.com/a/chat/s/<id>`. Query and fragment are ignored.

    Raises ToolError `conversation_url_unrecognized`.
    """
    refused = ToolError(
        "conversation_url_unrecognized",
        f"{url!r} is not a conversation or project URL of ChatGPT, z.ai or DeepSeek; pass the "
        "full https link of the conversation as shown in the browser's address bar.",
    )
    parts = urlsplit(url.strip())
    site = _HOST_SITES.get((parts.hostname or "").lower())
    if parts.scheme != "https" or site is None or parts.username or parts.port:
        raise refused
    path = [segment for segment in parts.path.split("/") if segment]
    conversation: str | None = None
    project: str | None = None
    if site == "chatgpt":
        if len(path) == 2 and path[0] == "c":
            conversation = path[1]
        elif len(path) >= 3 and path[0] == "g":
            match = _CHATGPT_PROJECT.match(path[1])
            project = match.group(1) if match else None
            if len(path) == 4 and path[2] == "c":
                conversation = path[3]
            elif not (len(path) == 3 and path[2] == "project" and project):
                raise refused
    elif site == "zai":
        if len(path) == 2 and path[0] == "c":
            conversation = path[1]
    elif len(path) == 4 and path[:3] == ["a", "chat", "s"]:
        conversation = path[3]
    if conversation is not None and not _CONVERSATION_ID.match(conversation):
        raise refused
    if conversation is None and project is None:
        raise refused
    return WebLocation(site, conversation, project)


@dataclass(frozen=True)
class Identity:
    """The stable identities a request names (any may be missing)."""

    site: str | None = None
    conversation_id: str | None = None
    project_id: str | None = None
    workspace_id: str | None = None
    conversation_url: str | None = None

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Identity:
        """Read site / conversation_id / project_id / workspace_id / conversation_url.

        A URL and explicit ids must agree. Raises ToolError `continuity_identity_conflict`,
        `conversation_url_unrecognized`, `invalid_params`.
        """
        site = params.get("site")
        conversation = params.get("conversation_id")
        project = params.get("project_id")
        url = params.get("conversation_url")
        if url is not None:
            location = parse_conversation_url(url)
            for name, given, found in (
                ("site", site, location.site),
                ("conversation_id", conversation, location.conversation_id),
                ("project_id", project, location.project_id),
            ):
                if given is not None and found is not None and given != found:
                    raise ToolError(
                        "continuity_identity_conflict",
                        f"{name} {given!r} disagrees with conversation_url, which says {found!r}; "
                        "pass one of them or make them agree.",
                        argument=name,
                    )
            site = site or location.site
            conversation = conversation or location.conversation_id
            project = project or location.project_id
        if site is None and (conversation is not None or project is not None):
            raise ToolError(
                "invalid_params",
                "conversation_id and project_id belong to a site; pass site as well.",
                argument="site",
            )
        return cls(site, conversation, project, params.get("workspace_id"), url)

    def stable(self) -> list[tuple[str, str, str]]:
        """(kind, site, value) of each identity given, most specific first."""
        found: list[tuple[str, str, str]] = []
        if self.site is not None and self.conversation_id is not None:
            found.append(("conversation", self.site, self.conversation_id))
        if self.site is not None and self.project_id is not None:
            found.append(("project", self.site, self.project_id))
        if self.workspace_id is not None:
            found.append(("workspace", WORKSPACE_SITE, self.workspace_id))
        return found


def bound_chains(conn: sqlite3.Connection, kind: str, site: str, value: str) -> list[str]:
    """The chains bound to one stable identity, most recently updated first."""
    rows = conn.execute(
        "SELECT b.continuity_id FROM continuity_bindings b "
        "JOIN continuity_chains c USING (continuity_id) "
        "WHERE b.kind = ? AND b.site = ? AND b.value = ? "
        "ORDER BY c.updated_at DESC, b.continuity_id",
        (kind, site, value),
    ).fetchall()
    return [str(row[0]) for row in rows]


@dataclass(frozen=True)
class Narrowing:
    """The chains the most specific matching identity points to (empty: none matched)."""

    matched_by: str | None
    chain_ids: list[str]


def narrow(conn: sqlite3.Connection, identity: Identity) -> Narrowing:
    """Try each stable identity, most specific first; the first that matches anything decides."""
    for kind, site, value in identity.stable():
        chains = bound_chains(conn, kind, site, value)
        if chains:
            return Narrowing(f"{kind}_id", chains)
    return Narrowing(None, [])
