"""A connector's side of the Edge's OAuth for tests: the consent page as a browser sees it
(`open_consent_at`, `poll`), and the `mcp` SDK's own OAuth client (`SdkOAuth`) with the browser's
part played by the test and the owner's approval a callable the test gives.

`SdkOAuth` keeps what a test needs to prove the flow happened as a connector runs it: the
authorization URLs the SDK sent the "browser" to, the consent pages and the redirects back, and
every HTTP exchange its client made (method, path, status, the bearer it carried, the
WWW-Authenticate it got, a form body it sent).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from tests.support.edge_harness import REDIRECT_URI, Edge
from tests.support.waiting import wait_until

#: Generous for a loaded 2-core machine: each wait ends as soon as its condition holds.
WAIT_S = 60.0


@dataclass
class Consent:
    """The consent page's state: the request id and the short code it shows, its poll token."""

    request_id: str
    code: str
    poll_token: str


def open_consent_at(edge: Edge, path: str) -> Consent:
    """GET the consent page at `path` (an authorization URL, also one a client built) as a browser."""
    page = edge.get(path)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    boot = re.search(r"const boot = (\{.*?\});", page.text)
    code = re.search(r'<strong id="code"[^>]*>([A-Z0-9]{6})</strong>', page.text)
    assert boot is not None and code is not None, page.text
    fields = json.loads(boot.group(1))
    assert fields["request_id"] in page.text
    return Consent(fields["request_id"], code.group(1), fields["poll_token"])


def poll(edge: Edge, consent: Consent) -> dict[str, Any]:
    """One poll of `POST /authorize/status`, as the page's script makes it."""
    answer = edge.post(
        "/authorize/status", json={"request_id": consent.request_id, "poll_token": consent.poll_token}
    )
    assert answer.status_code == 200, answer.text
    status: dict[str, Any] = answer.json()
    return status


class MemoryTokenStorage:
    """The SDK's token storage, in memory (one connector)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass(frozen=True)
class Exchange:
    """One HTTP exchange the SDK's client made."""

    method: str
    path: str
    status: int
    #: The bearer token the request carried, if any.
    bearer: str | None
    www_authenticate: str | None
    #: A form body (the token endpoint's), parsed; empty for others.
    form: dict[str, str] = field(default_factory=dict)
    #: The start of an error answer's body (4xx, 5xx), for the failure messages.
    detail: str = ""


@dataclass
class SdkOAuth:
    """The `mcp` SDK's OAuth client for /mcp on `edge` (an `OAuthClientProvider`): a 401 leads it
    to the RFC 9728 and RFC 8414 metadata, it registers (RFC 7591) and sends the "browser" to the
    authorization URL. The browser here opens the consent page, polls it once (pending), calls
    `approve(consent)` (the owner's part) and polls until the page is decided, then hands the
    redirect's code back to the SDK, which exchanges it with its PKCE verifier."""

    edge: Edge
    approve: Callable[[Consent], None]
    client_name: str = "SDK Connector"
    storage: MemoryTokenStorage = field(default_factory=MemoryTokenStorage)
    authorization_urls: list[str] = field(default_factory=list)
    consents: list[Consent] = field(default_factory=list)
    redirects: list[str] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)

    def http(self) -> httpx2.AsyncClient:
        """An httpx client authenticating with the SDK's OAuth provider, recording every exchange."""
        provider = OAuthClientProvider(
            server_url=f"{self.edge.base}/mcp",
            client_metadata=OAuthClientMetadata(
                client_name=self.client_name,
                redirect_uris=[AnyUrl(REDIRECT_URI)],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
            ),
            storage=self.storage,
            redirect_handler=self._open_browser,
            callback_handler=self._callback,
        )
        return httpx2.AsyncClient(
            auth=provider, trust_env=False, timeout=WAIT_S * 2, event_hooks={"response": [self._record]}
        )

    async def _record(self, response: httpx2.Response) -> None:
        request = response.request
        authorization = request.headers.get("authorization", "")
        form: dict[str, str] = {}
        if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            form = {name: values[0] for name, values in parse_qs(request.content.decode()).items()}
        detail = ""
        if response.status_code >= 400:
            detail = (await response.aread()).decode(errors="replace")[:300]
        self.exchanges.append(
            Exchange(
                request.method,
                request.url.path,
                response.status_code,
                authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None,
                response.headers.get("www-authenticate"),
                form,
                detail,
            )
        )

    async def _open_browser(self, authorization_url: str) -> None:
        await asyncio.to_thread(self._browser, authorization_url)

    def _browser(self, authorization_url: str) -> None:
        self.authorization_urls.append(authorization_url)
        consent = open_consent_at(self.edge, authorization_url.removeprefix(self.edge.base))
        self.consents.append(consent)
        assert poll(self.edge, consent)["status"] == "pending"
        self.approve(consent)
        decided = wait_until(
            lambda: (status := poll(self.edge, consent))["status"] != "pending" and status,
            "the consent page to see the owner's decision",
            WAIT_S,
        )
        assert decided["status"] == "approved", decided
        self.redirects.append(decided["redirect_to"])

    async def _callback(self) -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(self.redirects[-1]).query)
        return AuthorizationCodeResult(
            code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0]
        )
