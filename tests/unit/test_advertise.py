"""Which endpoint a broker tells other brokers and redirected clients (its lease row,
link hellos, redirects), and the exposure rule that applies to it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from broker.startup import StartupError, advertised_endpoint, check_exposure


@dataclass
class Settings:
    endpoint: str
    pub_endpoint: str = "ipc:///tmp/presence.sock"
    advertise: str | None = None
    insecure: bool = False


def test_a_broker_advertises_its_bind_when_it_names_one_address():
    warnings: list[str] = []
    assert advertised_endpoint(Settings("tcp://10.0.0.5:5555"), warnings) == "tcp://10.0.0.5:5555"
    assert warnings == []


def test_an_advertised_endpoint_wins_over_the_bind():
    settings = Settings("tcp://0.0.0.0:5555", advertise="tcp://bus-1.example:5555")
    warnings: list[str] = []
    assert advertised_endpoint(settings, warnings) == "tcp://bus-1.example:5555"
    assert warnings == []


@pytest.mark.parametrize("bind", ["tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://[::]:5555"])
def test_a_wildcard_bind_without_an_advertised_endpoint_is_warned_about(bind):
    warnings: list[str] = []
    assert advertised_endpoint(Settings(bind), warnings) == bind
    assert len(warnings) == 1 and "--advertise" in warnings[0]


def test_an_advertised_endpoint_a_client_cannot_connect_to_is_refused():
    with pytest.raises(StartupError, match="cannot advertise"):
        advertised_endpoint(Settings("tcp://0.0.0.0:5555", advertise="tcp://host:*"), [])


def test_advertising_a_network_address_without_curve_is_refused_like_binding_one():
    settings = Settings("tcp://127.0.0.1:5555", advertise="tcp://10.0.0.5:5555")
    with pytest.raises(StartupError, match="--curve"):
        check_exposure(settings, curve=False, warnings=[])
    check_exposure(settings, curve=True, warnings=[])
