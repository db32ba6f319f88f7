"""The operator's views over CURVE: on TCP with CURVE the peer's address is not known,
so ``list --all`` and ``runs`` need the broker's own key pair (``--operator-key``);
a client's key reads only what a member sees. And a tail whose key the PUB socket
refuses says so (exit 3) instead of waiting. Real broker process, real TCP, real keys."""

from __future__ import annotations

from .cli_helpers import run_cli
from .curve_helpers import connect_as, curve_broker  # noqa: F401 (a fixture)


def test_list_all_over_curve_needs_the_brokers_own_key(curve_broker, short_tmp):
    router, _, keys = curve_broker
    alice = connect_as(router, keys, "alice", "alice")
    base = ["--endpoint", router, "--curve-dir", str(keys)]
    refused = run_cli(short_tmp, *base, "--curve-client", "alice", "list", "--all")
    assert refused.code == 1 and refused.err.startswith("operator_only:"), refused
    assert run_cli(short_tmp, *base, "--curve-client", "alice", "runs").code == 1
    seen = run_cli(short_tmp, *base, "--operator-key", "list", "--all", "--json")
    assert seen.code == 0, seen
    assert [s["id"] for s in seen.json()["sessions"]] == [alice.id]
    alice.close()


def test_a_tail_whose_key_the_pub_socket_refuses_says_so_with_exit_3(curve_broker, short_tmp):
    _, pub, keys = curve_broker
    ran = run_cli(short_tmp, "tail", "--pub-endpoint", pub, "--curve-dir", str(keys),
                  "--curve-client", "bob")
    assert ran.code == 3 and ran.err.startswith(f"client: the PUB socket at {pub} refuses"), ran
    assert len(ran.err.splitlines()) == 1
