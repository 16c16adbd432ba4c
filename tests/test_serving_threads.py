"""Adaptive decoding threads: what other processes use of our CPUs, from /proc/stat and our own CPU time."""

import os

import pytest

from serving.threads import AdaptiveThreads, busy_cpu_seconds, threads_for

TICK = os.sysconf("SC_CLK_TCK")


def stat(busy_ticks: dict[int, int]) -> str:
    """A /proc/stat whose CPUs spent ``busy_ticks`` in user time (and as much idling, which does not count)."""
    lines = ["cpu  999 0 0 999 0 0 0 0 0 0"]
    lines += [f"cpu{cpu} {ticks} 0 0 5000 7 0 0 0 0 0" for cpu, ticks in busy_ticks.items()]
    return "\n".join([*lines, "intr 12345 0 0", "ctxt 999"])


def test_busy_time_counts_only_our_cpus_and_not_idle_or_iowait():
    text = "cpu  1 1 1 1 1 1 1 1\ncpu0 10 2 3 500 40 1 1 1 0 0\ncpu1 100 0 0 0 0 0 0 0 0 0\ncpu7 5 0 0 9 9 0 0 0"
    assert busy_cpu_seconds(text, {0}) == pytest.approx(18 / TICK)  # user+nice+system+irq+softirq+steal
    assert busy_cpu_seconds(text, {0, 1}) == pytest.approx(118 / TICK)


@pytest.mark.parametrize("others, threads", [(0.0, 2), (0.4, 2), (0.6, 1), (1.0, 1), (2.0, 1)])
def test_a_cpu_counts_as_taken_once_others_use_half_of_it(others, threads):
    assert threads_for(2, others) == threads


class Machine:
    """A fake /proc/stat, clock and process CPU time, advanced by the test."""

    def __init__(self):
        self.now, self.own, self.busy = 0.0, 0.0, {0: 0, 1: 0}

    def run(self, seconds: float, ours: float, others: float) -> None:
        """``seconds`` pass; we use ``ours`` CPUs and other processes ``others``."""
        self.now += seconds
        self.own += ours * seconds
        self.busy[0] += round((ours + others) * seconds * TICK)

    def threads(self, recorded: list[int]) -> AdaptiveThreads:
        return AdaptiveThreads(maximum=2, cpus={0, 1}, read_stat=lambda: stat(self.busy), clock=lambda: self.now,
                               own_cpu_seconds=lambda: self.own, set_threads=recorded.append)


def test_threads_drop_while_a_neighbour_is_busy_and_come_back_when_it_stops():
    machine, recorded = Machine(), []
    threads = machine.threads(recorded)
    assert threads.adjust() == 2  # the first sample only starts the measurement
    machine.run(0.5, ours=2.0, others=1.0)
    assert threads.adjust() == 2 and recorded == [2]  # within the interval: no new sample
    machine.run(0.5, ours=1.0, others=1.0)
    assert threads.adjust() == 1
    machine.run(1.0, ours=1.0, others=0.0)
    assert threads.adjust() == 2
    assert recorded == [2, 1, 2]


def test_our_own_load_is_not_mistaken_for_a_neighbour():
    machine, recorded = Machine(), []
    threads = machine.threads(recorded)
    threads.adjust()
    for _ in range(3):
        machine.run(1.0, ours=2.0, others=0.0)
        assert threads.adjust() == 2
    assert recorded == [2]
