"""A workstation for end-to-end tests of the link: two real runtimes, A and B (`herdr-mcp serve`
subprocesses on one simulated Herdr), registered as generations with A active (`ab_generations`),
and the CLI run as the owner runs it (`cli_json`).

Which generation ran a command shows in its output: each runtime is started with
`HERDR_LINK_TEST_GENERATION=<A|B>` (`MARK`) in its environment and herdr_exec's shell inherits it.
Side effects are counted in files under `counters`: `marked_command(counters, name)` appends the
generation to a file of its own, so a call that ran twice, or on the wrong generation, shows.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from herdr_mcp.generations import ControlFile, GenerationStore, Observation, activate
from tests.support.link_harness import Link, generation_for
from tests.support.runtime_harness import RunningRuntime, two_runtimes

MARK = "HERDR_LINK_TEST_GENERATION"
CLI = [sys.executable, "-m", "herdr_mcp"]
#: A CLI command's own deadline: a Python start and one local exchange, on a loaded 2-core machine.
CLI_TIMEOUT_S = 120


@dataclass
class Generations:
    """Runtimes A and B, their generation store (A active) and the test's directory."""

    a: RunningRuntime
    b: RunningRuntime
    store: GenerationStore
    tmp: Path

    @property
    def counters(self) -> Path:
        return self.tmp / "counters"


@dataclass
class LinkedGenerations(Generations):
    """`Generations` with `herdr-mcp link` in front of them."""

    link: Link


@contextlib.contextmanager
def ab_generations(tmp: Path) -> Iterator[Generations]:
    """Runtimes A and B marked with `MARK`, both registered (`tmp/generations`), A activated."""
    (tmp / "counters").mkdir()
    with two_runtimes(tmp, env_a={MARK: "A"}, env_b={MARK: "B"}) as (a, b):
        store = GenerationStore.in_dir(tmp / "generations")
        store.write_control(
            ControlFile(
                generations=(generation_for("A", a), generation_for("B", b)),
                observation=Observation(2, 50),
            ),
            expected_revision=0,
        )
        assert activate(store, "A").outcome == "activated"
        yield Generations(a, b, store, tmp)


def marked_command(counters: Path, name: str) -> str:
    """A shell command that appends the generation running it to `counters/name` and prints it."""
    return f'echo "${MARK}" >> {counters}/{name}; echo "${MARK}"'


def cli_json(*argv: str) -> dict[str, Any]:
    """`herdr-mcp <argv> --json` as its own process; its JSON answer (it must exit 0)."""
    done = subprocess.run(
        [*CLI, *argv, "--json"], capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def cli_text(*argv: str) -> str:
    """`herdr-mcp <argv>` as its own process, as a person reads it; its output (it must exit 0)."""
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout
