"""The aggregate state of one broker: the kernel's part and every room's tables.

Each room keeps its data in tables of its own (the session registry, asks, message
ids, runs and sticky queues, agents' conversations and jobs, the other brokers); this
is the one place that puts them side by side, as fields of :class:`BrokerState`,
which the engine builds. Handlers take it as a :class:`~broker.core.kernel.state.State`
and use the fields of the rooms they belong to or below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.core.agents.invocation_table import InvocationTable
from broker.core.agents.registry import Conversations
from broker.core.cluster.peers import Cluster
from broker.core.kernel.bounded import RecentMap
from broker.core.kernel.state import State
from broker.core.messaging.ask_table import AskTable
from broker.core.messaging.dedup import MessageIds
from broker.core.messaging.guard import Guards
from broker.core.messaging.inbound_gate import InboundGate
from broker.core.messaging.receipts import Receipts
from broker.core.sessions.departures import Departures
from broker.core.sessions.grants import UsedGrants
from broker.core.sessions.identity_table import IdentityTable
from broker.core.sessions.last_seen import LastSeen
from broker.core.sessions.registry import Registry
from broker.core.sessions.session_rate import SessionRate
from broker.core.runs.run_tree import Run
from broker.core.workflow.sticky_queue import StickyQueues


@dataclass(eq=False)
class BrokerState(State):
    # -- sessions
    registry: Registry = field(default_factory=Registry)
    # Who last held each id, newest last (bounded: see broker.core.sessions.identity_table).
    identities: IdentityTable = field(default_factory=IdentityTable)
    session_rate: SessionRate = field(default_factory=SessionRate)   # new sessions per peer
    departures: Departures = field(default_factory=Departures)   # peers still to be told
    used_grants: UsedGrants = field(default_factory=UsedGrants)   # child grants spent lately
    last_seen: LastSeen = field(default_factory=LastSeen)   # when sessions that left were here
    # -- messaging
    guards: Guards = field(default_factory=Guards)   # guarded sessions' views of their peers
    asks: AskTable = field(default_factory=AskTable)
    ids: MessageIds = field(default_factory=MessageIds)
    # Ordinary messages each session received lately: msg id -> sender id.
    recent: dict[str, RecentMap[str, str]] = field(default_factory=dict)
    # Threads (ask or message ids) each session has replied to lately.
    answered: dict[str, RecentMap[str, bool]] = field(default_factory=dict)
    # Live messages' receipts, and what ended sessions' clients did not have yet.
    receipts: Receipts = field(default_factory=Receipts)
    # Messages held for a person to release or drop (broker.core.messaging.inbound_gate).
    gate: InboundGate = field(default_factory=InboundGate)
    # -- workflow
    runs: dict[str, Run] = field(default_factory=dict)
    sticky: StickyQueues = field(default_factory=StickyQueues)
    # Runs by host: those each session hosts now, and those it hosted last (so a
    # returning host finds its runs without a scan of every run).
    hosted: dict[str, set[str]] = field(default_factory=dict)
    hosted_before: dict[str, set[str]] = field(default_factory=dict)
    leased: set[str] = field(default_factory=set)    # runs whose host left, lease running
    # Stages of ended runs, by host id, then by each spelling (broker.core.workflow.closed_stages).
    closed: dict[str, dict[str, Any]] = field(default_factory=dict)
    # -- agents: conversations (with their settings) and invoke jobs (respond/invoke)
    conversations: Conversations = field(default_factory=Conversations)
    invocations: InvocationTable = field(default_factory=InvocationTable)
    # -- cluster: the other brokers on the database
    cluster: Cluster = field(default_factory=Cluster)
