"""Questions a feature room asks the cluster, answered by functions the assembly names.

A lifecycle event (:mod:`broker.core.kernel.lifecycle`) tells the rooms that care
what happened; a hook is for the few places where a room needs the cluster's answer
before it goes on: a hello's id must be claimed store-wide before the session opens;
a stage, a stage's subagent or a host operation is refused when another live broker
owns the run; a ``list`` may wait for the rows of runs other brokers own; the
target resolver (:mod:`broker.core.routing.resolver`), when placement asks it,
weighs targets on other brokers. The rooms
call ``state.hooks.<name>``; :data:`broker.core.assembly.dispatch.HOOKS` names the
functions, installed where the engine is assembled, so no room outside
:mod:`broker.core.cluster` imports it.

Each hook is one function; its contract (what it raises or returns) is written on the
function the assembly installs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class Hooks:
    # (state, identity, session_id, refusal, reclaiming, open_as, now, unverified=None):
    # the session opens with open_as(id, refusal, now), at once or once the claim
    # is committed (broker.core.cluster.claims.claim).
    claim: Callable[..., None]
    # (state, run_id): raises BusError(run_elsewhere) when another live broker owns
    # the run (broker.core.cluster.ownership.check_here).
    check_run_here: Callable[..., None]
    # (state, session, re, answer, now) -> True when the list is answered by the
    # cluster, with the rows of runs other brokers own
    # (broker.core.cluster.remote_listing.wait_for_owners).
    wait_for_owners: Callable[..., bool]
    # (state, run_id) -> the id of the live broker that owns the run, or holds the
    # last host of it ended (broker.core.cluster.ownership.run_broker).
    run_broker: Callable[..., str | None]
    # (state, run_id) -> True while the run is a dead broker's that nobody adopted
    # yet (broker.core.cluster.ownership.orphaned).
    orphaned: Callable[..., bool]
    # (state, sender, to) -> the broker holding sends for the subagent of its dormant
    # run that ``to`` names, or None (broker.core.cluster.ownership.holder_of).
    holder_of: Callable[..., str | None]
    # (state, identity, env, now): handle a request from the top, as if it had just
    # arrived (broker.core.assembly.dispatch.handle): the cluster hands back requests
    # that waited for a run's owner or came over a link.
    handle: Callable[..., None]
