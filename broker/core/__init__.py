"""The sans-IO routing core: see :mod:`broker.core.assembly.engine`.

The core is split into rooms, one idea each, in one order: a room imports only the
rooms before it in :data:`ROOMS` (tests/unit/test_layers.py checks every import).

* ``kernel``: the types every room speaks (records, commands, inputs, lifecycle
  events, hooks, bounded maps) and the kernel's part of the state with its verbs;
* ``runs``: the data of workflow runs (paths, run trees);
* ``sessions``: who is connected, with which id, groups and authority;
* ``agents``: agents' conversations, invoke jobs and their recovery;
* ``messaging``: delivery, message ids, asks and replies, targets;
* ``workflow``: hosting runs, binding stages, sticky queues, held sends;
* ``routing``: where a request goes (the resolver) and the send path, across both;
* ``cluster``: the other brokers (links, mirrors, claims, ownership, forwarding);
* ``assembly``: what puts the rooms together: the aggregate state, the dispatch
  tables, arrivals (a hello's steps across the rooms), the stats figures, the engine.
"""

ROOMS = ("kernel", "runs", "sessions", "agents", "messaging", "workflow", "routing",
         "cluster", "assembly")

from broker.core.kernel.commands import Command, Persist, Publish, Send
from broker.core.assembly.engine import Engine, IdentityRecord, Limits

__all__ = ["Command", "Engine", "IdentityRecord", "Limits", "Persist", "Publish", "Send"]
