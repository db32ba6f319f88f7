"""Commit durations (broker.commit_times): the histogram Prometheus reads and the
percentiles stats shows."""

from pytest import approx

from broker.commit_times import BUCKETS_S, WINDOW, CommitTimes


def test_no_commit_yet_has_no_percentiles_and_empty_buckets():
    snapshot = CommitTimes().snapshot()
    assert (snapshot.count, snapshot.p50_s, snapshot.p99_s) == (0, None, None)
    assert snapshot.buckets == (0,) * (len(BUCKETS_S) + 1)


def test_buckets_are_cumulative_and_a_duration_on_a_bound_counts_in_it():
    times = CommitTimes()
    for seconds in (0.0005, 0.0007, 0.003, 9.0):
        times.record(seconds)
    buckets = dict(zip([*BUCKETS_S, float("inf")], times.snapshot().buckets))
    assert (buckets[0.0005], buckets[0.001], buckets[0.005], buckets[5.0]) == (1, 2, 3, 3)
    assert buckets[float("inf")] == 4 and times.snapshot().sum_s == approx(9.0042)


def test_percentiles_follow_the_latest_window_only():
    times = CommitTimes()
    for _ in range(WINDOW):
        times.record(1.0)                  # old and slow
    for n in range(WINDOW):
        times.record(0.001 * (n + 1))      # then 1 ms to 1.024 s, evenly
    snapshot = times.snapshot()
    assert snapshot.count == 2 * WINDOW
    assert snapshot.p50_s == 0.001 * (WINDOW // 2 + 1) and snapshot.p99_s == 0.001 * 1014
