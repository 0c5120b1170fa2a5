"""Herdr's own delays and windows, on a clock tests can scale.

Every constant here is read from Herdr's source (protocol 20, 0.8.2); `Clock.scale` multiplies
them (`SimConfig.time_scale`, default 1.0 = real timing). Delays chosen by callers (`timeout_ms`
in a request, `after_ms` in an agent script) are never scaled.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

# Herdr: src/app/api/agents.rs, AGENT_PROMPT_SUBMIT_DELAY (Enter follows the typed prompt).
AGENT_PROMPT_SUBMIT_DELAY_MS = 300
# Herdr: src/api/wait.rs, AGENT_PROMPT_EFFECT_TIMEOUT_MS (the prompt must change the state).
AGENT_PROMPT_EFFECT_TIMEOUT_MS = 5_000
# Herdr: src/api/server.rs, CONNECTION_POLL_INTERVAL (subscriptions and waits poll this often).
CONNECTION_POLL_INTERVAL_MS = 100
# Herdr: src/app/agents.rs, AGENT_START_SETTLE_DELAY (launch_pending until then).
AGENT_START_SETTLE_DELAY_MS = 3_000


@dataclass(frozen=True)
class Clock:
    """Herdr's durations times `scale`."""

    scale: float = 1.0

    def ms(self, herdr_ms: float) -> float:
        """A Herdr duration in milliseconds, scaled."""
        return herdr_ms * self.scale

    def seconds(self, herdr_ms: float) -> float:
        return herdr_ms * self.scale / 1000

    async def sleep(self, herdr_ms: float) -> None:
        await asyncio.sleep(self.seconds(herdr_ms))

    async def poll(self) -> None:
        """One poll interval of a subscription or wait loop."""
        await asyncio.sleep(self.seconds(CONNECTION_POLL_INTERVAL_MS))
