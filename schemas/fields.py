"""How a declared envelope field is checked: its types, its limit, its items.

:mod:`schemas.kinds` declares every kind with these; :mod:`schemas.welcome` declares
the welcome's fields the same way; the PROTOCOL.md tables name the types with
:func:`type_name`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TEXT_MAX = 4096          # any declared string field without a limit of its own

_NONE = type(None)
# The words of the protocol tables: msgpack's nil is "null".
TYPE_NAMES = {str: "str", int: "int", float: "float", bool: "bool", list: "list",
              dict: "map", _NONE: "null", object: "any"}


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    types: tuple[type, ...]
    required: bool = False
    max_len: int | None = TEXT_MAX      # characters of a str, items of a list
    doc: str = ""
    items: type | None = None           # the exact type of every item of a list

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not acceptable for this field, or None."""
        if not isinstance(value, self.types) or (value.__class__ is bool and bool not in self.types
                                                 and object not in self.types):
            return f"field {self.name!r} has the wrong type"
        if self.max_len is not None and isinstance(value, (str, list)) and len(value) > self.max_len:
            return f"field {self.name!r} is too long"
        if self.items is not None and value.__class__ is list:
            item = self.items
            for one in value:
                if one.__class__ is not item:
                    return f"field {self.name!r} holds an item that is not a {TYPE_NAMES[item]}"
        return None


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    direction: str
    doc: str
    fields: tuple[Field, ...] = ()
    request: bool = False         # carries an ``id`` that a ``result`` answers
    params: str | None = None     # tool parameters checked by that JSON Schema


def field(name: str, types: type | tuple[type, ...], doc: str, *, required: bool = False,
          max_len: int | None = TEXT_MAX, items: type | None = None) -> Field:
    """A declared field: ``types`` one type or several."""
    return Field(name, types if isinstance(types, tuple) else (types,), required, max_len, doc,
                 items)


def type_name(declared: Field) -> str:
    """The field's types as the protocol tables write them (``str or null``, ``list of str``)."""
    names = " or ".join(TYPE_NAMES[t] for t in declared.types)
    return f"{names} of {TYPE_NAMES[declared.items]}" if declared.items is not None else names
