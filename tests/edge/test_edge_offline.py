"""The Edge's tests reach nothing off this machine, wrangler's own start-up lookups included.

`wrangler dev --local` (4.86.0) and the miniflare it runs look up three hosts by themselves unless
told not to (tests/support/edge_harness.py, OFFLINE_ENV, names the source of each setting):
- https://workers.cloudflare.com/cf.json, for `request.cf`, at every start, once for the proxy
  worker and once for the Worker: CLOUDFLARE_CF_FETCH_ENABLED=false;
- the npm registry, for wrangler's latest version, from the banner before every command:
  WRANGLER_HIDE_BANNER=true (and npm_registry on a closed loopback port for the other two places
  that ask: a compatibility-date warning and an unexpected error);
- https://sparrow.cloudflare.com (usage metrics) and Sentry (crash reports):
  WRANGLER_SEND_METRICS=false, WRANGLER_SEND_ERROR_REPORTS=false.

The proof: `running_edge` in a network namespace that has only loopback (scripts/netns-run; its
/etc/resolv.conf names 127.0.0.1, so a lookup shows with its question), under strace following
every process it starts (wrangler, node, workerd, esbuild). The Edge must answer /health there,
and the trace must hold no connect or datagram to an address off loopback and no DNS lookup
(port 53, on any address). A datagram the child itself sends to 127.0.0.1:53 after the
Edge stops must be found, and be the only finding: the trace is read, and it sees the child.

Every Edge test in such a namespace, by hand (edge/README.md, "Tests"):
`scripts/netns-run --trace /tmp/edge.trace .venv/bin/pytest -q tests/edge tests/link/test_link_edge*.py`

Run as a script, `python tests/edge/test_edge_offline.py --report TRACE` lists what a trace holds
(scripts/netns-run --trace uses it); it needs only the standard library.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NETNS_RUN = ROOT / "scripts" / "netns-run"
#: The child's bound (its Edge starts in ~5 s here), inside pytest's own 120 s per test.
CHILD_TIMEOUT_S = 110
#: The name the child's own DNS query to 127.0.0.1:53 asks for (the trace must show it).
PROBE_NAME = "herdr-offline-probe.invalid"

# One socket address as strace 6 prints it: {sa_family=AF_INET, sin_port=htons(53),
# sin_addr=inet_addr("10.0.0.1")} or {sa_family=AF_INET6, sin6_port=htons(443), ...,
# inet_pton(AF_INET6, "2001:db8::1", &sin6_addr), ...}.
_SOCKADDR = re.compile(r"\{sa_family=(AF_INET6?),([^{}]*)\}")
_PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
_ADDRESS = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')
# A line's start: the process (or thread) id, its command name (strace -Y), the call.
_CALL = re.compile(r"^(\d+)(?:<([^>]*)>)?\s+(?:<\.\.\. )?(\w+)")
_FD = re.compile(r"\((\d+)(?:<[^>]*>)?, ")


@dataclass(frozen=True)
class Attempt:
    """One call in a trace that sent to, or connected to, an inet address."""

    pid: int
    #: The command name strace -Y printed for the pid ("" without -Y).
    command: str
    call: str
    address: str
    port: int
    line: str
    #: The name a DNS query asked for, where the trace shows it (on the line or a later send).
    question: str | None = None

    @property
    def off_machine(self) -> bool:
        """An address other than loopback (or the unspecified one, which is this host)."""
        ip = ipaddress.ip_address(self.address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return not (ip.is_loopback or ip.is_unspecified)

    @property
    def dns(self) -> bool:
        return self.port == 53

    def describe(self) -> str:
        name = self.question or (dns_question(self.line) if self.dns else None)
        what = f" (DNS question {name!r})" if name else ""
        command = f" ({self.command})" if self.command else ""
        return f"pid {self.pid}{command} {self.call} {self.address} port {self.port}{what}"


def attempts(trace: str) -> list[Attempt]:
    """Every inet address a traced call named (connect, sendto, sendmsg, sendmmsg). A DNS query
    sent on a socket connected before (glibc's resolver: connect, then sendmmsg without an
    address) names its question on that connect's attempt."""
    found: list[Attempt] = []
    connected: dict[tuple[int, int], int] = {}  # (pid, fd) -> index in found of its connect
    for line in trace.splitlines():
        call = _CALL.match(line)
        if call is None:
            continue
        fd = _FD.match(line, call.end())
        addresses = _SOCKADDR.findall(line)
        for _family, fields in addresses:
            port = _PORT.search(fields)
            address = _ADDRESS.search(fields)
            if port is None or address is None:
                continue
            attempt = Attempt(
                int(call[1]), call[2] or "", call[3], address[1] or address[2], int(port[1]), line
            )
            if fd is not None and call[3] == "connect":
                connected[int(call[1]), int(fd[1])] = len(found)
            found.append(attempt)
        if not addresses and fd is not None and (int(call[1]), int(fd[1])) in connected:
            index = connected[int(call[1]), int(fd[1])]
            question = dns_question(line)
            if found[index].dns and question is not None:
                found[index] = dataclasses.replace(found[index], question=question)
    return found


def findings(trace: str) -> list[Attempt]:
    """The attempts that break the rule: off loopback, or a DNS lookup anywhere."""
    return [attempt for attempt in attempts(trace) if attempt.off_machine or attempt.dns]


_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)")
_NAMED_ESCAPES = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "a": 7, "b": 8, "\\": 92, '"': 34}


_PAYLOAD = re.compile(r'^\d+(?:<[^>]*>)?\s+sendto\(\d+, "((?:[^"\\]|\\.)*)"|iov_base="((?:[^"\\]|\\.)*)"')


def dns_question(line: str) -> str | None:
    """The name a DNS query in the (truncated) payload strace printed asks for, if it shows."""
    payload = _PAYLOAD.search(line)
    if payload is None:
        return None
    data = bytearray()
    position = 0
    text = payload[1] or payload[2]
    for escape in _ESCAPE.finditer(text):
        data += text[position : escape.start()].encode("latin-1")
        code = escape[1]
        if code[0] == "x":
            data.append(int(code[1:], 16))
        elif code[0] in "01234567":
            data.append(int(code, 8) & 0xFF)
        else:
            data.append(_NAMED_ESCAPES.get(code, ord(code[0]) & 0xFF))
        position = escape.end()
    data += text[position:].encode("latin-1")
    labels, offset = [], 12  # the question follows the 12-byte header
    while offset < len(data) and data[offset] != 0:
        length = data[offset]
        labels.append(data[offset + 1 : offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    return ".".join(labels) or None


def namespace_unavailable() -> str | None:
    """Why a loopback-only namespace under strace cannot be had here, or None."""
    tracer = re.search(r"^TracerPid:\s*(\d+)", Path("/proc/self/status").read_text(), re.MULTILINE)
    if tracer is not None and tracer[1] != "0":
        return "this run is traced already (scripts/netns-run --trace), and a process has one tracer"
    for tool in ("unshare", "ip", "strace"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(
        [str(NETNS_RUN), "--trace", os.devnull, "true"], capture_output=True, text=True, timeout=60
    )
    if probe.returncode != 0:
        return f"no network namespace with strace here: {probe.stderr.strip()[-300:]}"
    return None


# The child: the harness's Edge inside the namespace, then one DNS query (a 12-byte header, then
# the question: PROBE_NAME, type A, class IN) to loopback port 53, where nothing listens.
CHILD = """
import json, socket, sys
from pathlib import Path
from tests.support.edge_harness import running_edge
with running_edge(Path(sys.argv[1])) as edge:
    health = edge.get("/health")
    seen = {"base": edge.base, "status": health.status_code, "health": health.json()}
log = (Path(sys.argv[1]) / "wrangler.log").read_text(errors="replace")
name = b"".join(bytes([len(label)]) + label.encode() for label in sys.argv[2].split("."))
query = bytes.fromhex("4242 0100 0001 0000 0000 0000") + name + bytes.fromhex("00 0001 0001")
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
    probe.sendto(query, ("127.0.0.1", 53))
print(json.dumps({**seen, "log": log}))
"""


def test_the_edge_starts_in_a_loopback_only_namespace_and_tries_no_other_host(tmp_path: Path) -> None:
    import pytest  # here, so that --report needs only the standard library

    from tests.support.edge_harness import ensure_edge_packages

    reason = namespace_unavailable()
    if reason is not None:
        pytest.skip(reason)
    ensure_edge_packages()  # npm ci, if needed, runs out here: the namespace has no registry
    trace_file = tmp_path / "edge.trace"
    child = subprocess.run(
        [
            str(NETNS_RUN),
            "--trace",
            str(trace_file),
            sys.executable,
            "-c",
            CHILD,
            str(tmp_path / "edge"),
            PROBE_NAME,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])},
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    trace = trace_file.read_text(errors="replace")
    # The script reports the probe, so it exits 3 after a child that succeeded.
    assert child.returncode == 3, (child.returncode, child.stdout[-2000:], child.stderr[-3000:])
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    # (a) It starts and answers /health.
    assert seen["status"] == 200 and seen["health"]["status"] == "ok", seen
    # The trace covers wrangler's whole tree: the child's polls reach the Edge's port, and
    # wrangler's node and its two workerd processes connect on loopback too.
    edge_port = int(seen["base"].rsplit(":", 1)[1])
    loopback = attempts(trace)
    assert any(a.port == edge_port and a.call == "connect" for a in loopback), trace[-2000:]
    assert len({a.pid for a in loopback}) >= 3, sorted({a.pid for a in loopback})
    # (b) Nothing but the child's own query went off loopback or to a DNS server.
    found = findings(trace)
    assert [(a.call, a.address, a.port) for a in found] == [("sendto", "127.0.0.1", 53)], [
        a.describe() for a in found
    ]
    assert dns_question(found[0].line) == PROBE_NAME, found[0].line
    assert f"DNS question {PROBE_NAME!r}" in child.stderr, child.stderr[-2000:]
    # miniflare's own word for the cf.json fetch it would have made (tests/support/edge_harness.py).
    assert "Request.cf" not in seen["log"], seen["log"][-2000:]


def _inet(address: str, port: int) -> str:
    return f'{{sa_family=AF_INET, sin_port=htons({port}), sin_addr=inet_addr("{address}")}}'


def _inet6(address: str, port: int) -> str:
    return (
        f"{{sa_family=AF_INET6, sin6_port=htons({port}), sin6_flowinfo=htonl(0), "
        f'inet_pton(AF_INET6, "{address}", &sin6_addr), sin6_scope_id=0}}'
    )


def test_the_trace_reader_names_what_wrangler_looked_up_without_the_settings() -> None:
    # strace 6.1's lines from `wrangler dev --local` on this machine before OFFLINE_ENV (its
    # cf.json and update-check lookups; the addresses here are documentation ones), and others.
    registry_query = r"\203\303\1\0\0\1\0\0\0\0\0\0\10registry\5npmjs\3org\0\0\1\0\1"
    trace = "\n".join(
        [
            f"26142<node> connect(19, {_inet('192.0.2.53', 53)}, 16) = 0",
            "26142<node> sendmmsg(19, [{msg_hdr={msg_name=NULL, msg_namelen=0, "
            f'msg_iov=[{{iov_base="{registry_query}", iov_len=36}}], msg_iovlen=1}}, msg_len=36}}], 2) = 2',
            f"26111 connect(19, {_inet('203.0.113.80', 443)}, 16) = -1 EINPROGRESS",
            f"26149 connect(18, {_inet('127.0.0.1', 38523)}, 16 <unfinished ...>",
            f'26150 sendto(7, "\\1\\2", 2, 0, {_inet6("::1", 53)}, 28) = 2',
            f"26151 connect(9, {_inet6('::ffff:127.0.0.1', 443)}, 28) = 0",
            '26152 connect(3, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT',
        ]
    )
    assert [(a.pid, a.address, a.port) for a in findings(trace)] == [
        (26142, "192.0.2.53", 53),
        (26111, "203.0.113.80", 443),
        (26150, "::1", 53),
    ]
    assert len(attempts(trace)) == 5
    assert findings(trace)[0].describe() == (
        "pid 26142 (node) connect 192.0.2.53 port 53 (DNS question 'registry.npmjs.org')"
    )
    assert dns_question(trace.splitlines()[1]) == "registry.npmjs.org"
    cf_query = r"\1\2\1\0\0\1\0\0\0\0\0\0\7workers\ncloudflare\3com\0"
    assert dns_question(f'26142 sendmmsg(19, [{{iov_base="{cf_query}"') == "workers.cloudflare.com"


def _report(trace_file: Path) -> int:
    """Print (to stderr) each finding of `trace_file`; 0 when there is none, 1 otherwise."""
    trace = trace_file.read_text(errors="replace")
    found = findings(trace)
    summary = f"{len(attempts(trace))} inet addresses in {trace_file}; {len(found)} off loopback or DNS"
    print("netns-run: " + summary, file=sys.stderr)
    for attempt in found:
        print("netns-run: " + attempt.describe(), file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--report":
        sys.exit("usage: python tests/edge/test_edge_offline.py --report TRACE")
    sys.exit(_report(Path(sys.argv[2])))
