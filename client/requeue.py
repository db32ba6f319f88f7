"""What a session sends again after a re-welcome, and how an ask keeps its deadline.

Pure functions for :class:`client.protocol.ClientProtocol` (socket side): on a
welcome, every owed request sent before goes again under its own id, in the order
it was made, then whatever waited in the outbox meanwhile, less what its caller
gave up on; asks are held back for a resend after a pause (the protocol's
``ASK_RESEND_DELAY_S``) with what is left of their own timeout.
"""

from __future__ import annotations

from collections import deque
from typing import Any

# An ask resent at its deadline still goes out with a valid timeout; its caller's own
# deadline, a few seconds later, ends the wait in any case.
MIN_RESENT_TIMEOUT_S = 0.5


def request_id(item: dict | tuple) -> str | None:
    """The id of a queued request; None for a post (an envelope owed no answer)."""
    return item[1] if item.__class__ is tuple else item.get("id")


def is_ask(item: dict | tuple) -> bool:
    """An ask or supervisor ask: the requests that carry their own ``timeout``."""
    return item.__class__ is not tuple and "timeout" in item and "id" in item


def requeue(outbox: deque, owed: dict[str, Any]) -> list[str]:
    """Refill ``outbox`` for a new welcome (see the module docstring); returns the
    ids of the asks held back for a later resend."""
    waited = []
    try:
        while True:
            waited.append(outbox.popleft())
    except IndexError:
        pass
    waiting_ids = {request_id(item) for item in waited}
    again = [entry.request for msg_id, entry in list(owed.items()) if msg_id not in waiting_ids]
    # A post has no id; a request is kept while still owed.
    again.extend(item for item in waited
                 if (msg_id := request_id(item)) is None or msg_id in owed)
    deferred = [msg_id for item in again if is_ask(item)
                and (msg_id := request_id(item)) is not None]
    if deferred:
        again = [item for item in again if not is_ask(item)]
    # Callers may have appended meanwhile: those go after, in their order.
    outbox.extendleft(reversed(again))
    return deferred


def resend(owed: Any, now: float) -> dict | tuple:
    """What to send again for ``owed``: its request, an ask with the rest of its
    own timeout (``owed.made_at``, when the driver set it, is when it was made), so
    a reconnect never stretches the ask's deadline."""
    request = owed.request
    made_at = getattr(owed, "made_at", None)
    if made_at is None or not is_ask(request):
        return request
    left = request["timeout"] - (now - made_at)
    return {**request, "timeout": max(left, MIN_RESENT_TIMEOUT_S)}
