"""The soak test's verdicts: memory growth after warm-up, lost and unexpected answers, per-window accounting."""

from pathlib import Path

import pytest

from bench.soak import Outcome, SoakConfig, growth_mib_per_minute, verdict, windows

CONFIG = SoakConfig(Path("model"), Path("dev.jsonl"), warmup_minutes=5, max_growth_mib_per_minute=1.0)


def test_growth_is_the_slope_after_warm_up_only():
    warming = [(m, 400 + 40 * m) for m in range(5)]  # fast growth while warming up does not count
    steady = [(m, 600 + 0.5 * (m % 2)) for m in range(5, 21)]  # then flat, with noise
    assert growth_mib_per_minute(warming + steady, 5) == pytest.approx(0.0, abs=0.05)
    leaking = [(m, 600 + 3 * m) for m in range(5, 21)]
    assert growth_mib_per_minute(warming + leaking, 5) == pytest.approx(3.0)


def test_growth_is_not_judged_on_fewer_than_three_samples_after_warm_up():
    assert growth_mib_per_minute([(m, 100.0 * m) for m in range(7)], 5) is None


def test_a_clean_run_passes_and_growth_fails_it():
    outcomes = [Outcome("short", "OK", 1.0, 0.1), Outcome("cancelled", "CANCELLED", 2.0, 0.02),
                Outcome("deadline", "DEADLINE_EXCEEDED", 2.5, 0.001), Outcome("deadline", "OK", 3.0, 0.001)]
    assert verdict(4, outcomes, 0.2, CONFIG) == []
    assert verdict(4, outcomes, None, CONFIG) == []
    assert verdict(4, outcomes, 1.5, CONFIG) == ["memory grows 1.50 MiB/minute after warm-up (limit 1.0)"]


def test_lost_and_unexpected_answers_fail_the_run():
    outcomes = [Outcome("short", "OK", 1.0, 0.1), Outcome("long", "DEADLINE_EXCEEDED", 2.0, 120.0),
                Outcome("nbest", "CANCELLED", 2.0, 0.3), Outcome("cancelled", "INTERNAL", 3.0, 0.1)]
    assert verdict(5, outcomes, 0.0, CONFIG) == [
        "1 requests never finished",
        "unexpected answers: {'long: DEADLINE_EXCEEDED': 1, 'nbest: CANCELLED': 1, 'cancelled: INTERNAL': 1}",
    ]


def test_windows_count_each_outcome_once_in_the_window_it_finished_in():
    outcomes = [Outcome("short", "OK", 10.0, 0.1), Outcome("short", "OK", 59.9, 0.3), Outcome("deadline", "DEADLINE_EXCEEDED", 60.0, 0.001),
                Outcome("short", "OK", 61.0, 0.2), Outcome("long", "OK", 130.0, 1.0)]
    rss = [(0.0, 400.0), (30.0, 540.0), (60.0, 500.0), (90.0, 505.0), (120.0, 510.0), (125.0, 512.0)]
    rows = windows(outcomes, [60.0, 120.0, 125.0], rss)
    assert [(r["minute"], r["served"], r["errors"], r["rss_mib"], r["rss_peak_mib"]) for r in rows] == [
        (1.0, 2, {}, 500.0, 540.0), (2.0, 1, {"DEADLINE_EXCEEDED": 1}, 510.0, 510.0), (125 / 60, 0, {}, 512.0, 512.0)]
    assert rows[0]["p50_ms"] == pytest.approx(200.0)


def test_a_window_without_a_sample_of_its_own_reports_the_last_one_before_it():
    rows = windows([], [1.0, 2.0], [(0.0, 400.0), (1.0, 450.0)])
    assert [(r["rss_mib"], r["rss_peak_mib"]) for r in rows] == [(450.0, 450.0), (450.0, 450.0)]
