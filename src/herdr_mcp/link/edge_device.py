"""The Edge this workstation is paired with: pairing, and the device record that keeps the secret.

`herdr-mcp link pair --edge <url> --code <code>` sends `POST <edge>/link/pair`
`{"code", "name"}` (docs/edge-protocol.md, "Pairing and the device secret"); the Edge answers a
device id and a device secret once, and both are kept with the Edge's URL in
`<config dir>/edge-device.json` (`layout.py`), 0600, written atomically only after the answer
was checked. The record fails closed: a present but bad one is `edge_device_invalid`, and the
link then does not connect to any Edge (it never guesses an Edge or a secret).

The Edge URL is an origin: `https://host[:port]`, or `http://` only for a loopback address
literal (a test Edge under workerd); `http://` to anything else is refused
(`edge_url_insecure`): the device secret grants a shell on this workstation.

Without `--code`, `link pair` starts the pairing itself with the owner's ADMIN_SECRET
(`start_pairing`: `GET <edge>/pair`, the same request the pairing page makes in a browser):
the secret comes from `--admin-secret-file`, else from the file `herdr-mcp edge deploy` kept for
the Worker deployed at that origin. The secret is sent to that origin only, never printed.

Pairing follows no redirect. It goes through the proxy the environment names for the Edge's host
(`proxies.py`: `HTTPS_PROXY`/`ALL_PROXY`, `NO_PROXY`; never for a loopback Edge), the same rule as
the updater's downloads and the link's WebSocket.
"""

from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2

from herdr_mcp.errors import LocalFault, RefusedFault, UsageFault
from herdr_mcp.local_http import is_loopback_address
from herdr_mcp.proxies import proxy_for
from herdr_mcp.records import FailRule, RecordInvalid, RecordKind, load_strict

#: The record is a few hundred bytes; anything larger is not ours.
EDGE_DEVICE_RECORD = RecordKind(
    "edge-device.json", max_bytes=8 * 1024, fail=FailRule.CLOSED, schema_version=1
)
#: The pairing code the Edge's pairing page shows (docs/edge-protocol.md: 6 digits).
PAIRING_CODE = re.compile(r"^[0-9]{6}$")
#: `dev_` and an id the Edge chose; kept to characters a header and a file name carry as they are.
DEVICE_ID = re.compile(r"^dev_[A-Za-z0-9_-]{1,64}$")
#: 256 bits as unpadded base64url: 43 characters.
DEVICE_SECRET = re.compile(r"^[A-Za-z0-9_-]{43}$")
#: The device name the Edge shows; a host name, capped.
MAX_NAME_CHARS = 64
#: The pairing answer is two short strings.
MAX_PAIR_ANSWER_BYTES = 16 * 1024
PAIR_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class EdgeDevice:
    """This workstation as the Edge knows it. `repr` never shows the secret."""

    edge_url: str
    device_id: str
    device_secret: str
    name: str
    paired_at: str

    def __repr__(self) -> str:
        return f"EdgeDevice(edge_url={self.edge_url!r}, device_id={self.device_id!r}, name={self.name!r})"

    @property
    def authorization(self) -> str:
        """The `Authorization` header value of `/link/connect` (never put in a URL)."""
        return f"Device {self.device_id}.{self.device_secret}"

    @property
    def connect_url(self) -> str:
        """`wss://<edge>/link/connect` (`ws://` for a loopback test Edge)."""
        scheme = "wss" if self.edge_url.startswith("https://") else "ws"
        return f"{scheme}://{self.edge_url.split('://', 1)[1]}/link/connect"

    def to_dict(self) -> dict[str, Any]:
        return {
            "edge_url": self.edge_url,
            "device_id": self.device_id,
            "device_secret": self.device_secret,
            "name": self.name,
            "paired_at": self.paired_at,
        }

    def public(self) -> dict[str, Any]:
        """What status output may show: everything but the secret."""
        return {
            "edge_url": self.edge_url,
            "device_id": self.device_id,
            "name": self.name,
            "paired_at": self.paired_at,
        }


def check_edge_url(value: str) -> str:
    """`value` as an Edge origin (`https://host[:port]`, or `http://` to a loopback address
    literal), without a trailing slash; raises `UsageFault` (`edge_url_invalid`,
    `edge_url_insecure`)."""
    invalid = UsageFault(
        "edge_url_invalid", f"{value!r} is not an Edge origin; pass it as https://<host>[:<port>], no path"
    )
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (ValueError for a port that is no number or out of range)
    except ValueError:
        raise invalid from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise invalid
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise invalid
    if parts.scheme == "http" and not is_loopback_address(parts.hostname):
        raise UsageFault(
            "edge_url_insecure",
            f"{value} is plain http to a host that is not loopback; the device secret would cross the "
            "network in clear: use the Edge's https:// origin",
        )
    return f"{parts.scheme}://{parts.netloc}"


def read_device(path: Path) -> EdgeDevice | None:
    """The paired Edge, or None when this workstation is not paired; raises
    `LocalFault("edge_device_invalid")` for a present but bad record (fails closed)."""
    try:
        document = EDGE_DEVICE_RECORD.read(path)
        return None if document is None else _parse(document)
    except (RecordInvalid, ValueError) as exc:
        raise LocalFault(
            "edge_device_invalid",
            f"{path}: {exc}; the link will not connect to the Edge: pair again "
            "(`herdr-mcp link unpair`, then `herdr-mcp link pair`)",
        ) from exc


def _parse(document: dict[str, Any]) -> EdgeDevice:
    fields = {"schema_version", "edge_url", "device_id", "device_secret", "name", "paired_at"}
    if set(document) != fields:
        raise ValueError(f"fields must be {sorted(fields)}")
    strings = {key: document[key] for key in fields - {"schema_version"}}
    if not all(isinstance(value, str) for value in strings.values()):
        raise ValueError("every field but schema_version is a string")
    check_edge_url(strings["edge_url"])
    if not DEVICE_ID.match(strings["device_id"]) or not DEVICE_SECRET.match(strings["device_secret"]):
        raise ValueError("device_id or device_secret is malformed")
    return EdgeDevice(**strings)


def write_device(path: Path, device: EdgeDevice) -> None:
    """Keep `device` (0600, atomic)."""
    EDGE_DEVICE_RECORD.write(path, device.to_dict())


def remove_device(path: Path) -> bool:
    """Forget the paired Edge; whether there was a record."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def default_device_name() -> str:
    return _clean_name(socket.gethostname()) or "workstation"


def _clean_name(name: str) -> str:
    return "".join(char for char in name if char.isprintable())[:MAX_NAME_CHARS].strip()


def pair(
    edge_url: str, code: str, name: str | None = None, *, timeout_s: float = PAIR_TIMEOUT_S
) -> EdgeDevice:
    """`POST <edge>/link/pair` with `code`; the device the Edge made (not yet written).

    Raises `UsageFault` for a bad URL, code or name, `RefusedFault` with the Edge's own code
    (`pairing_expired`, `pairing_locked`, ...) when it refused, or `edge_answer_invalid` for an
    answer that is not the protocol's, `LocalFault("edge_unreachable")` when it could not be asked.
    """
    origin = check_edge_url(edge_url)
    if not PAIRING_CODE.match(code):
        raise UsageFault(
            "pairing_code_invalid", f"{code!r} is not a pairing code: pass the 6 digits the Edge shows"
        )
    device_name = default_device_name() if name is None else _clean_name(name)
    if not device_name:
        raise UsageFault("device_name_invalid", "pass a --name with printable characters")
    body = json.dumps({"code": code, "name": device_name}).encode()
    parts = urlsplit(origin)
    try:
        with (
            httpx2.Client(
                trust_env=False,
                follow_redirects=False,
                timeout=timeout_s,
                proxy=proxy_for(parts.scheme, parts.hostname or ""),
            ) as http,
            http.stream(
                "POST", f"{origin}/link/pair", content=body, headers={"content-type": "application/json"}
            ) as answer,
        ):
            data = b""
            for piece in answer.iter_bytes():
                data += piece
                if len(data) > MAX_PAIR_ANSWER_BYTES:
                    raise RefusedFault(
                        "edge_answer_invalid", f"{origin}/link/pair answered more than expected"
                    )
            status = answer.status_code
    except httpx2.HTTPError as exc:
        raise LocalFault(
            "edge_unreachable",
            f"cannot reach {origin} ({type(exc).__name__}: {exc}); check the URL and the network",
        ) from None
    return _pairing_answer(origin, device_name, status, data)


def start_pairing(edge_url: str, admin_secret: str, *, timeout_s: float = PAIR_TIMEOUT_S) -> str:
    """`GET <edge>/pair` with the owner's ADMIN_SECRET (as a Bearer token): the Edge starts a
    pairing and answers its 6-digit code as JSON, the same code its pairing page shows a browser.
    Raises as `pair` does; a wrong secret is the Edge's own `admin_unauthorized`."""
    origin = check_edge_url(edge_url)
    parts = urlsplit(origin)
    try:
        with httpx2.Client(
            trust_env=False,
            follow_redirects=False,
            timeout=timeout_s,
            proxy=proxy_for(parts.scheme, parts.hostname or ""),
        ) as http:
            answer = http.get(
                f"{origin}/pair",
                headers={"authorization": f"Bearer {admin_secret}", "accept": "application/json"},
            )
    except httpx2.HTTPError as exc:
        raise LocalFault(
            "edge_unreachable",
            f"cannot reach {origin} ({type(exc).__name__}: {exc}); check the URL and the network",
        ) from None
    data = answer.content[: MAX_PAIR_ANSWER_BYTES + 1]
    try:
        document = load_strict(data) if len(data) <= MAX_PAIR_ANSWER_BYTES else None
    except RecordInvalid:
        document = None
    if answer.status_code != 200:
        raise _refusal(document, "start a pairing", f"{origin}/pair answered HTTP {answer.status_code}")
    code = document.get("code") if document else None
    if not isinstance(code, str) or not PAIRING_CODE.match(code):
        raise RefusedFault("edge_answer_invalid", f"{origin}/pair answered no pairing code")
    return code


def _refusal(document: dict[str, Any] | None, what: str, otherwise: str) -> RefusedFault:
    """The Edge's own `{"error": {code, message}}` as a refusal, else `edge_answer_invalid`."""
    error = document.get("error") if document else None
    code, message = (error.get("code"), error.get("message")) if isinstance(error, dict) else (None, None)
    if isinstance(code, str) and isinstance(message, str):
        return RefusedFault(code, f"the Edge refused to {what}: {message}")
    return RefusedFault("edge_answer_invalid", otherwise)


def _pairing_answer(origin: str, name: str, status: int, data: bytes) -> EdgeDevice:
    try:
        document = load_strict(data)
    except RecordInvalid:
        document = None
    if status != 200:
        raise _refusal(document, "pair", f"{origin}/link/pair answered HTTP {status}")
    device_id = document.get("device_id") if document else None
    secret = document.get("device_secret") if document else None
    if not isinstance(device_id, str) or not DEVICE_ID.match(device_id):
        raise RefusedFault("edge_answer_invalid", f"{origin}/link/pair answered no valid device_id")
    if not isinstance(secret, str) or not DEVICE_SECRET.match(secret):
        raise RefusedFault("edge_answer_invalid", f"{origin}/link/pair answered no valid device_secret")
    paired_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return EdgeDevice(origin, device_id, secret, name, paired_at)
