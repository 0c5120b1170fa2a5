"""The release repository simulator: GitHub-shaped answers, programmable faults, a faithful log."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.support.repository_sim import API_HOST, DOWNLOAD_HOST, Behavior, ReleaseRepositorySimulator

REPOSITORY = "herdr/herdr-mcp"
INDEX = f"/repos/{REPOSITORY}/releases"
RELEASE_FIELDS = {"id", "tag_name", "name", "draft", "prerelease", "published_at", "body", "assets"}
ASSET_FIELDS = {"id", "name", "size", "state", "browser_download_url", "content_type"}


@pytest.fixture
def sim() -> Iterator[ReleaseRepositorySimulator]:
    with ReleaseRepositorySimulator(REPOSITORY) as simulator:
        yield simulator


@pytest.fixture
def client(sim: ReleaseRepositorySimulator) -> Iterator[httpx2.Client]:
    with httpx2.Client(verify=sim.client_ssl_context(), timeout=5.0) as http:
        yield http


def test_index_is_github_shaped_and_paginated(sim: ReleaseRepositorySimulator, client: httpx2.Client) -> None:
    first = sim.add_release("v1.0.0")
    first.add_asset("runtime-manifest.json", b"{}", content_type="application/json")
    sim.add_release("v1.1.0-rc.1")
    sim.add_release("v2.0.0", draft=True)

    listed = client.get(sim.url(INDEX)).json()
    assert [release["tag_name"] for release in listed] == ["v2.0.0", "v1.1.0-rc.1", "v1.0.0"]
    assert all(set(release) == RELEASE_FIELDS for release in listed)
    assert [(release["draft"], release["prerelease"]) for release in listed] == [
        (True, False),
        (False, True),
        (False, False),
    ]
    assert listed[0]["published_at"] is None
    (asset,) = listed[2]["assets"]
    assert set(asset) == ASSET_FIELDS
    assert asset["size"] == 2
    assert asset["browser_download_url"] == sim.url(
        f"/{REPOSITORY}/releases/download/v1.0.0/runtime-manifest.json", host=DOWNLOAD_HOST
    )

    pages = [client.get(sim.url(f"{INDEX}?per_page=2&page={page}")).json() for page in (1, 2, 3)]
    assert [[release["tag_name"] for release in page] for page in pages] == [
        ["v2.0.0", "v1.1.0-rc.1"],
        ["v1.0.0"],
        [],
    ]
    assert client.get(sim.url(f"{INDEX}?page=x")).status_code == 400


def test_latest_is_the_newest_published_final_release(
    sim: ReleaseRepositorySimulator, client: httpx2.Client
) -> None:
    assert client.get(sim.url(f"{INDEX}/latest")).status_code == 404
    sim.add_release("v1.0.0")
    sim.add_release("v1.1.0")
    sim.add_release("v1.2.0-rc.1")
    sim.add_release("v1.3.0", draft=True)
    assert client.get(sim.url(f"{INDEX}/latest")).json()["tag_name"] == "v1.1.0"


def test_assets_from_bytes_and_files_and_the_log(
    sim: ReleaseRepositorySimulator, client: httpx2.Client, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle.tar.gz"
    bundle.write_bytes(bytes(range(256)) * 1000)
    release = sim.add_release("v1.0.0")
    release.add_asset("runtime-manifest.json", b'{"a": 1}')
    release.add_asset("bundle.tar.gz", bundle, listed_size=10)
    manifest_url, bundle_url = (asset["browser_download_url"] for asset in release.to_json()["assets"])
    assert release.to_json()["assets"][1]["size"] == 10

    before = time.time()
    assert client.get(manifest_url).content == b'{"a": 1}'
    assert client.get(bundle_url).content == bundle.read_bytes()
    assert client.get(sim.url("/nothing/here", host=DOWNLOAD_HOST)).status_code == 404

    log = sim.log
    assert [(entry.method, entry.host, entry.path, entry.status) for entry in log] == [
        ("GET", DOWNLOAD_HOST, release.download_path("runtime-manifest.json"), 200),
        ("GET", DOWNLOAD_HOST, release.download_path("bundle.tar.gz"), 200),
        ("GET", DOWNLOAD_HOST, "/nothing/here", 404),
    ]
    assert all(before <= entry.time <= time.time() for entry in log)
    assert sim.downloads() == log[:2]
    sim.clear_log()
    assert sim.log == []


def test_both_host_names_are_served_and_trusted(
    sim: ReleaseRepositorySimulator, client: httpx2.Client
) -> None:
    sim.add_release("v1.0.0")
    for host in (API_HOST, DOWNLOAD_HOST):
        assert client.get(sim.url(INDEX, host=host)).status_code == 200
    assert [entry.host for entry in sim.log] == [API_HOST, DOWNLOAD_HOST]
    assert sim.hosts == {API_HOST, DOWNLOAD_HOST}
    assert sim.ca_file.read_bytes() == sim.ca_pem
    assert sim.api_base_url == f"https://{API_HOST}:{sim.port}"


def test_an_untrusting_client_fails_the_handshake(sim: ReleaseRepositorySimulator) -> None:
    with httpx2.Client(verify=ssl.create_default_context()) as http, pytest.raises(httpx2.ConnectError):
        http.get(sim.url(INDEX))


def test_asset_redirect_leads_to_the_object_on_the_other_host(
    sim: ReleaseRepositorySimulator, client: httpx2.Client
) -> None:
    asset = sim.add_release("v1.0.0").add_asset(
        "a.bin", b"payload", behavior=Behavior(redirect_host=API_HOST)
    )
    url = sim.url(f"/{REPOSITORY}/releases/download/v1.0.0/a.bin", host=DOWNLOAD_HOST)
    response = client.get(url)
    assert response.status_code == 302
    assert response.headers["location"] == sim.url(f"/objects/{asset.id}", host=API_HOST)
    assert client.get(response.headers["location"]).content == b"payload"
    assert [(entry.host, entry.status) for entry in sim.downloads()] == [
        (DOWNLOAD_HOST, 302),
        (API_HOST, 200),
    ]


def test_api_redirects_keep_the_query_and_apply_on_the_api_host_only(
    sim: ReleaseRepositorySimulator, client: httpx2.Client
) -> None:
    sim.api_behavior = Behavior(redirect_host=DOWNLOAD_HOST, redirect_scheme="http", redirect_status=301)
    response = client.get(sim.url(f"{INDEX}?per_page=5&page=2"))
    assert response.status_code == 301
    assert response.headers["location"] == sim.url(
        f"{INDEX}?per_page=5&page=2", host=DOWNLOAD_HOST, scheme="http"
    )
    assert client.get(sim.url(INDEX, host=DOWNLOAD_HOST)).status_code == 200


def test_http_errors(sim: ReleaseRepositorySimulator, client: httpx2.Client) -> None:
    sim.add_release("v1.0.0").add_asset("a.bin", b"payload", behavior=Behavior(status=503))
    sim.api_behavior = Behavior(status=500)
    response = client.get(sim.url(INDEX))
    assert response.status_code == 500
    assert "message" in response.json()
    asset = client.get(sim.url(f"/{REPOSITORY}/releases/download/v1.0.0/a.bin", host=DOWNLOAD_HOST))
    assert asset.status_code == 503
    assert b"payload" not in asset.content


def test_throttled_body(sim: ReleaseRepositorySimulator, client: httpx2.Client) -> None:
    sim.add_release("v1.0.0").add_asset(
        "a.bin", b"x" * 50, behavior=Behavior(chunk_size=10, chunk_delay=0.05)
    )
    started = time.monotonic()
    with client.stream(
        "GET", sim.url(f"/{REPOSITORY}/releases/download/v1.0.0/a.bin", host=DOWNLOAD_HOST)
    ) as response:
        chunks = list(response.iter_raw())
    assert b"".join(chunks) == b"x" * 50
    assert len(chunks) > 1
    assert time.monotonic() - started >= 0.2


def test_bodies_larger_than_listed_and_lying_lengths(
    sim: ReleaseRepositorySimulator, client: httpx2.Client
) -> None:
    release = sim.add_release("v1.0.0")
    release.add_asset("extra.bin", b"abc", behavior=Behavior(extra_bytes=1000))
    release.add_asset("chunked.bin", b"abc", behavior=Behavior(chunked=True, extra_bytes=5))
    release.add_asset("overstated.bin", b"abc", behavior=Behavior(declared_length=1000))
    release.add_asset("understated.bin", b"abcdef", behavior=Behavior(declared_length=2))
    listed = {asset["name"]: asset["size"] for asset in release.to_json()["assets"]}
    assert set(listed.values()) == {3, 6}

    def url(name: str) -> str:
        return sim.url(release.download_path(name), host=DOWNLOAD_HOST)

    extra = client.get(url("extra.bin"))
    assert extra.headers["content-length"] == "1003"
    assert extra.content == b"abc" + bytes(1000)
    chunked = client.get(url("chunked.bin"))
    assert "content-length" not in chunked.headers
    assert chunked.content == b"abc" + bytes(5)
    with pytest.raises(httpx2.RemoteProtocolError):
        client.get(url("overstated.bin"))
    assert client.get(url("understated.bin")).content == b"ab"


def test_raw_body_override(sim: ReleaseRepositorySimulator, client: httpx2.Client) -> None:
    sim.api_behavior = Behavior(body=b"not json")
    assert client.get(sim.url(INDEX)).content == b"not json"


def test_stop_ends_a_download_in_progress_and_cleans_up() -> None:
    sim = ReleaseRepositorySimulator(REPOSITORY)
    sim.start()
    sim.add_release("v1.0.0").add_asset(
        "slow.bin", b"x" * 1000, behavior=Behavior(chunk_size=1, chunk_delay=0.5)
    )
    url = sim.url(f"/{REPOSITORY}/releases/download/v1.0.0/slow.bin", host=DOWNLOAD_HOST)
    ca_file, port = sim.ca_file, sim.port
    received = threading.Event()
    outcome: list[BaseException | bytes] = []

    def download() -> None:
        with httpx2.Client(verify=sim.client_ssl_context(), timeout=5.0) as http:
            try:
                with http.stream("GET", url) as response:
                    body = b""
                    for chunk in response.iter_raw():
                        body += chunk
                        received.set()
                    outcome.append(body)
            except httpx2.HTTPError as exc:
                outcome.append(exc)

    downloader = threading.Thread(target=download)
    downloader.start()
    assert received.wait(5)
    started = time.monotonic()
    sim.stop()
    downloader.join(5)
    assert not downloader.is_alive()
    assert time.monotonic() - started < 2
    result = outcome[0]
    assert isinstance(result, httpx2.HTTPError) or (isinstance(result, bytes) and len(result) < 1000)
    assert not ca_file.exists()
    with httpx2.Client(verify=False) as http, pytest.raises(httpx2.ConnectError):
        http.get(f"https://{API_HOST}:{port}{INDEX}")


def test_index_json_is_valid_utf8_json(sim: ReleaseRepositorySimulator, client: httpx2.Client) -> None:
    sim.add_release("v1.0.0", body="notes with ünïcode")
    response = client.get(sim.url(INDEX))
    assert response.headers["content-type"].startswith("application/json")
    assert json.loads(response.content)[0]["body"] == "notes with ünïcode"


def test_other_methods_are_logged_and_refused(sim: ReleaseRepositorySimulator, client: httpx2.Client) -> None:
    assert client.post(sim.url(INDEX), content=b"{}").status_code == 405
    assert [(entry.method, entry.path, entry.status) for entry in sim.log] == [("POST", INDEX, 405)]
