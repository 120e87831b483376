"""Run a set of child processes as one: prefixed output, restarts with backoff, clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from producers.stack.lifeline import die_with_parent

STOP_GRACE = 10.0
MAX_BACKOFF = 30.0
STABLE_AFTER = 30.0

Printer = Callable[[str, str], None]


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    next_start: float = 0.0
    pump: threading.Thread | None = field(default=None, repr=False)
    env: dict[str, str] | None = field(default=None, repr=False)  # else the supervisor's

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    def __init__(self, printer: Printer, env: dict[str, str] | None = None) -> None:
        self.children: list[Child] = []
        self._print = printer
        self._env = env
        self._stopping = threading.Event()

    def add(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Child:
        child = Child(name, argv, env=env)
        self.children.append(child)
        return child

    def _spawn(self, child: Child) -> None:
        child.process = subprocess.Popen(
            child.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=child.env if child.env is not None else self._env,
            start_new_session=True,  # Ctrl-C reaches us; we stop the children in order
            preexec_fn=die_with_parent(),  # and a kill -9 of us stops them too
        )
        child.started_at = time.monotonic()
        child.pump = threading.Thread(target=self._pump, args=(child,), daemon=True)
        child.pump.start()

    def _pump(self, child: Child) -> None:
        process = child.process
        assert process is not None and process.stdout is not None
        for raw in iter(process.stdout.readline, b""):
            self._print(child.name, raw.decode("utf-8", "replace").rstrip())

    def start_all(self) -> None:
        for child in self.children:
            self._spawn(child)

    def watch(self) -> None:
        """Restart children that die, until `stop` is called."""
        while not self._stopping.wait(0.5):
            for child in self.children:
                self._check(child)

    def _check(self, child: Child) -> None:
        if child.running() or self._stopping.is_set():
            return
        now = time.monotonic()
        if child.next_start == 0.0:
            code = child.process.returncode if child.process else None
            if now - child.started_at > STABLE_AFTER:
                child.restarts = 0
            delay = min(MAX_BACKOFF, 2.0**child.restarts)
            child.next_start = now + delay
            self._print(child.name, f"exited with code {code}; restarting in {delay:.0f}s")
            return
        if now >= child.next_start:
            child.restarts += 1
            child.next_start = 0.0
            self._spawn(child)
            self._print(child.name, f"restarted (pid {child.pid})")

    def stop(self) -> None:
        """SIGTERM every child (newest role first), wait, then SIGKILL what is left."""
        self._stopping.set()
        for child in reversed(self.children):
            if child.running() and child.process is not None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for child in reversed(self.children):
            if child.process is None:
                continue
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
        for child in self.children:
            if child.pump is not None:
                child.pump.join(timeout=1)
