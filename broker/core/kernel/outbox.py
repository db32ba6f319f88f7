"""The final pass: handlers' commands in, the shell's commands out.

Handlers append :class:`~broker.core.kernel.commands.Deliver` and
:class:`~broker.core.kernel.commands.Answer` commands; :func:`render` turns them into
:class:`~broker.core.kernel.commands.Send` commands holding envelopes built by
:mod:`schemas.envelopes`, in order. Batching lives here and only here: a
multi-message delivery becomes one ``msgs``, and the quiet, ackable answers of one
pass become one ``acks`` per peer, after everything else for that pass.
"""

from __future__ import annotations

from schemas import envelopes
from schemas.errors import BusError

from broker.core.kernel.commands import Answer, Command, Deliver, Send


def render(commands: list[Command]) -> list[Command]:
    """The commands for the shell: ``Send``, ``Publish`` and ``Persist`` only."""
    out: list[Command] = []
    acks: dict[bytes, list[str]] = {}
    append = out.append
    for command in commands:
        kind = command.__class__
        if kind is Deliver:
            append(Send(command.identity, delivery(command)))
        elif kind is Answer:
            value = command.value
            if value.__class__ is BusError or isinstance(value, BusError):
                for re in command.ids:
                    append(Send(command.identity, envelopes.error_result(re, value)))
            elif command.quiet and command.ackable:
                box = acks.get(command.identity)
                if box is None:
                    acks[command.identity] = list(command.ids)
                else:
                    box.extend(command.ids)
            else:
                for re in command.ids:
                    env = envelopes.result(re, value)
                    if command.own_id:
                        env["messageId"] = re
                    append(Send(command.identity, env))
        else:
            append(command)
    for identity, ids in acks.items():
        append(Send(identity, envelopes.acks(ids)))
    return out


def delivery(d: Deliver) -> dict:
    """The ``msg`` or ``msgs`` envelope of ``d``."""
    if d.attachments is not None:
        return envelopes.msg(d.ids[0], d.sender_id, d.sender_name, d.texts[0],
                             d.attachments or [], d.sent_at, d.expects_reply, d.extra)
    return envelopes.msgs(d.sender_id, d.sender_name, d.sent_at, d.ids, d.texts)
