"""How many threads decoding uses: every CPU while the machine is quiet, only those other processes leave free.

The threads of one OpenMP operator wait for each other at its end, and libgomp's waiting threads spin. When
another process takes one of our CPUs, one decoding thread is descheduled while the other spins through its
time slice waiting for it, at every one of the thousands of operators of a beam search. Measured on 2 busy CPUs
(BENCHMARKS.md, "Server under a noisy neighbour"), two fixed threads served 5 to 9 times fewer requests/s than
threads adapted this way. Two threads win on a quiet machine, and passive waiting
(``OMP_WAIT_POLICY=PASSIVE``) pays a wake-up per operator there. So the worker samples, about once a second, how
much of its CPUs other processes use (``/proc/stat`` minus its own CPU time) and decodes on the CPUs they leave.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

logger = logging.getLogger(__name__)


def busy_cpu_seconds(stat: str, cpus: set[int]) -> float:
    """CPU time spent on anything but idling on ``cpus`` since boot, from the text of ``/proc/stat``."""
    ticks = os.sysconf("SC_CLK_TCK")
    busy = 0
    for line in stat.splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, idle, iowait, *rest = (int(v) for v in values)
            busy += user + nice + system + sum(rest[:3])  # irq, softirq, steal; guest time is inside user
    return busy / ticks


def threads_for(cpus: int, others_busy: float) -> int:
    """Threads on ``cpus`` that leave other processes their share: a CPU counts as taken once they use half of it."""
    return max(1, cpus - int(others_busy + 0.5))


@dataclass
class AdaptiveThreads:
    """Call :meth:`adjust` from the decoding thread between steps; it changes torch's thread count when needed."""

    maximum: int  # threads on a quiet machine
    interval_s: float = 1.0
    cpus: set[int] = field(default_factory=lambda: os.sched_getaffinity(0))
    read_stat: Callable[[], str] = lambda: Path("/proc/stat").read_text()
    clock: Callable[[], float] = time.monotonic
    own_cpu_seconds: Callable[[], float] = time.process_time
    set_threads: Callable[[int], None] = torch.set_num_threads
    threads: int = 0  # now in use; 0 until the first adjust()
    _last: tuple[float, float, float] | None = None  # clock, busy, own CPU seconds at the last sample

    def adjust(self) -> int:
        """Sample the CPUs once per interval and set the thread count; returns the threads in use."""
        now = self.clock()
        if self._last is not None and now - self._last[0] < self.interval_s:
            return self.threads
        sample = (now, busy_cpu_seconds(self.read_stat(), self.cpus), self.own_cpu_seconds())
        wanted, others = self.maximum, 0.0
        if self._last is not None:
            elapsed, busy, own = (new - old for new, old in zip(sample, self._last))
            others = (busy - own) / elapsed
            wanted = min(self.maximum, threads_for(len(self.cpus), others))
        self._last = sample
        if wanted != self.threads:
            if self.threads:
                logger.info("decoding threads %d -> %d: other processes use %.1f of %d CPUs",
                            self.threads, wanted, others, len(self.cpus))
            self.set_threads(wanted)
            self.threads = wanted
        return self.threads
