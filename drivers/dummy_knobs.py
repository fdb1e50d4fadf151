"""The dummy driver's fault-injection knobs: delays, failures, crashes, gates.

Every knob names a driver method, optionally narrowed to resources whose name
starts with a prefix: ``create_share`` matches every create_share call,
``create_share.web-data-`` only those for a resource named ``web-data-...``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

CRASH_EXIT_CODE = 137  # what a shell reports for SIGKILL; tests look for it


def _matches(key: str, method: str, name: str) -> bool:
    if key == method:
        return True
    prefix = method + "."
    return key.startswith(prefix) and name.startswith(key[len(prefix):])


class Knobs:
    """Knob values of one backend, checked against the driver's methods."""

    def __init__(
        self,
        methods: Iterable[str],
        *,
        delays: dict[str, float],
        fail: list[str],
        crash_before: list[str],
        crash_after: list[str],
        gate_dir: str | None,
        gate_poll_interval: float,
    ) -> None:
        """:raises ValueError: a knob names a method the driver does not have."""
        known = set(methods)
        for option, keys in (
            ("dummy_method_delays", delays),
            ("dummy_fail_methods", fail),
            ("dummy_crash_before", crash_before),
            ("dummy_crash_after", crash_after),
        ):
            for key in keys:
                if key.split(".", 1)[0] not in known:
                    raise ValueError(
                        f"{option}: '{key}' names no dummy driver method "
                        "(use <method> or <method>.<name prefix>)"
                    )
        self.delays = dict(delays)
        self.fail = list(fail)
        self.crash_before = list(crash_before)
        self.crash_after = list(crash_after)
        self.gate_dir = gate_dir
        self.gate_poll_interval = gate_poll_interval

    def should_fail(self, method: str, name: str) -> bool:
        return any(_matches(k, method, name) for k in self.fail)

    def delay(self, method: str, name: str) -> None:
        seconds = max(
            (v for k, v in self.delays.items() if _matches(k, method, name)), default=0.0
        )
        if seconds:
            time.sleep(seconds)

    def gated(self, method: str, name: str) -> bool:
        if not self.gate_dir:
            return False
        try:
            files = os.listdir(self.gate_dir)
        except FileNotFoundError:
            return False
        return any(_matches(f, method, name) for f in files)

    def wait_at_gate(self, method: str, name: str) -> None:
        while self.gated(method, name):
            time.sleep(self.gate_poll_interval)

    def crash_if(self, point: str, method: str, name: str) -> None:
        """``os._exit`` when a crash point ``point`` (before/after) matches."""
        keys = self.crash_before if point == "before" else self.crash_after
        if any(_matches(k, method, name) for k in keys):
            # os._exit: no cleanup, no flushing, like a SIGKILL mid-operation.
            try:
                os.write(2, f"dummy driver: crash point {point} {method} ({name})\n".encode())
            except OSError:
                pass
            os._exit(CRASH_EXIT_CODE)
