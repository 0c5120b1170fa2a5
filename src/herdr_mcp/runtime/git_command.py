"""Running the `git` binary for the runtime: one hardened argv, a scrubbed environment, capped
output and a deadline.

- every run gets `-C <root>`, `--no-optional-locks` (never take the index lock a user's Git may
  need), `--no-pager`, `--literal-pathspecs` unless the caller gives every pathspec its own magic,
  and `-c core.quotepath=off -c color.ui=false -c core.fsmonitor=false`;
- the environment drops variables that would point Git at another repository or run another
  program, and sets GIT_TERMINAL_PROMPT=0, GIT_OPTIONAL_LOCKS=0 and LC_ALL=C (stable messages for
  the error mapping of `raise_for_failure`);
- stdout is read while Git runs and only up to the cap (+1 byte to know it was exceeded); past
  the cap Git is killed, with the helpers it started (its own process group). Every run has a
  deadline (`git_timeout`).

What is asked of Git, and how its answers are parsed, is `runtime.tools.git`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from herdr_mcp.errors import ToolError

# Only the first line of stderr is ever shown; keep enough for a long path in it.
_STDERR_CAP = 16 * 1024
_READ_CHUNK = 65536

# Variables that would make Git look at another repository or run another program.
_FOREIGN_GIT_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "PAGER",
)


@dataclass(frozen=True)
class GitOutput:
    """What one git run left: stdout (capped), whether the cap cut it, stderr, exit status."""

    stdout: bytes
    truncated: bool
    stderr: str
    returncode: int


def _git_env() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in _FOREIGN_GIT_ENV}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    env.pop("LANGUAGE", None)
    return env


def run_git(
    root: Path, args: Sequence[str], *, max_bytes: int, timeout: float, magic: bool = False
) -> GitOutput:
    """Run git in `root`, keeping at most max_bytes + 1 bytes of stdout; kill it past that.

    Pathspecs are literal unless `magic` is set; then every pathspec in `args` must carry its
    own magic (`:(literal)...`), since nothing else keeps a caller's path from being a pattern.
    Git runs in its own process group so that a kill also reaches the helpers it started
    (filters, hooks of a repository's config).
    """
    argv = [
        "git",
        "-C",
        str(root),
        "--no-optional-locks",
        "--no-pager",
        *([] if magic else ["--literal-pathspecs"]),
        "-c",
        "core.quotepath=off",
        "-c",
        "color.ui=false",
        "-c",
        "core.fsmonitor=false",
        *args,
    ]
    deadline = time.monotonic() + timeout
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_git_env(),
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise ToolError("git_unavailable", "git is not installed on this workstation; install Git.") from exc
    with process:
        try:
            stdout, stderr, truncated = _collect(process, max_bytes + 1, deadline)
            if truncated:
                _kill_group(process)
            returncode = process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except (TimeoutError, subprocess.TimeoutExpired):
            raise ToolError(
                "git_timeout",
                f"git did not answer within {timeout:g} s; try a narrower path or use herdr_exec.",
            ) from None
        finally:
            if process.poll() is None:
                _kill_group(process)
    return GitOutput(
        stdout=stdout,
        truncated=truncated,
        stderr=stderr.decode("utf-8", errors="replace"),
        returncode=returncode,
    )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    # Not yet reaped, so the group id (== pid) cannot have been reused.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _collect(process: subprocess.Popen[bytes], keep: int, deadline: float) -> tuple[bytes, bytes, bool]:
    """Read stdout (up to `keep` bytes) and stderr (capped) until EOF, the cap, or the deadline."""
    # Both are PIPE in run_git.
    assert process.stdout is not None
    assert process.stderr is not None
    stdout = bytearray()
    stderr = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, stdout)
        selector.register(process.stderr, selectors.EVENT_READ, stderr)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            for key, _ in selector.select(remaining):
                chunk = os.read(key.fd, _READ_CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer: bytearray = key.data
                if buffer is stdout:
                    stdout += chunk
                    if len(stdout) >= keep:
                        return bytes(stdout[:keep]), bytes(stderr), True
                elif len(stderr) < _STDERR_CAP:
                    stderr += chunk[: _STDERR_CAP - len(stderr)]
    return bytes(stdout), bytes(stderr), False


def raise_for_failure(output: GitOutput) -> None:
    """Refuse a failed run: `not_a_git_repository`, else `git_failed` with stderr's first line.

    A run cut at its cap is not a failure: the caller reports it as truncated.
    """
    if output.returncode == 0 or output.truncated:
        return
    if "not a git repository" in output.stderr.lower():
        raise ToolError(
            "not_a_git_repository",
            "This root is not inside a Git work tree; use herdr_fs_list or herdr_exec instead.",
        )
    first_line = (
        output.stderr.strip().splitlines()[0] if output.stderr.strip() else f"exit {output.returncode}"
    )
    raise ToolError(
        "git_failed", f"git failed: {first_line}. Check the arguments or inspect with herdr_exec."
    )
