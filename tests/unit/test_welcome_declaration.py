"""Every welcome the broker gives is the one schemas.welcome declares (PROTOCOL.md's table)."""

from __future__ import annotations

from schemas.welcome import WELCOME_FIELDS, problems

from .harness import Bus, uuid_from


def _welcomes(bus: Bus) -> list[dict]:
    plain = bus.hello("alice")
    agent = bus.hello("lys", agent="lys", channel="discord:1")
    control = bus.hello("cli", sessionKind="control")
    child = bus.hello("kid", parent=plain["sessionId"])
    wrong_secret = bus.hello("again", sessionId=plain["sessionId"], token="not-the-secret")
    unknown_id = bus.hello("stranger", sessionId=uuid_from(77))
    crowded = bus.hello("crowd", homeGroup="a", groups=["a", "b", "c", "d"])
    return [plain, agent, control, child, wrong_secret, unknown_id, crowded]


def test_every_sort_of_welcome_is_the_declared_one():
    for welcome in _welcomes(Bus(max_groups=2)):
        assert welcome.pop("ok") is True
        assert problems(welcome) == [], welcome


def test_every_optional_welcome_field_is_given_somewhere():
    """A declared field no welcome carries is a stale declaration."""
    given = {name for welcome in _welcomes(Bus(max_groups=2)) for name in welcome}
    assert {field.name for field in WELCOME_FIELDS} <= given


def test_a_welcome_with_an_undeclared_field_is_caught():
    welcome = Bus().hello("alice")
    del welcome["ok"]
    welcome["surprise"] = 1
    del welcome["token"]
    assert problems(welcome) == ["missing 'token'", "undeclared 'surprise'"]
