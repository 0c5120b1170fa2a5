"""The Chrome native messaging host (`herdr-mcp native-host`, docs/browser-protocol.md section 4).

The extension's service worker talks to this process over Chrome native messaging; the process
forwards an allowlisted set of requests over the runtime's Unix socket with the bearer added, so
the browser never holds the bearer.

    framing.py   the wire: 32-bit native-endian length + UTF-8 JSON, limits, chunked replies
    protocol.py  the one parse boundary for frames from the browser, and the path allowlist
    target.py    which runtime socket and token file a request goes to (read again per request)
    host.py      the asyncio host: one reader, one writer, requests and streams concurrently
    install.py   the host manifest for Chrome/Chromium and the launcher it points to
"""
