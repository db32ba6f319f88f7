"""broker.idle: when a broker started on demand stops, on a fake clock."""

from broker.idle import IdleExit


def test_a_broker_nobody_ever_joins_stops_after_the_idle_time_from_its_start():
    idle = IdleExit(5.0, now=100.0)
    assert not idle.due(0, 104.9)
    assert idle.due(0, 105.0)


def test_the_idle_time_counts_from_when_the_last_session_left():
    idle = IdleExit(5.0, now=100.0)
    assert not idle.due(2, 104.0)
    assert not idle.due(1, 150.0)       # any session keeps it, however long
    assert not idle.due(0, 151.0)       # the last one left: the count starts here
    assert not idle.due(0, 155.9)
    assert not idle.due(1, 156.0) and not idle.due(0, 157.0)   # one came back and left
    assert idle.due(0, 162.0)
