"""A msgpack value, byte by byte: each header and scalar with its offset and meaning.

For the worked example of PROTOCOL.md, so a reader can check an encoder of their own
against real frames. It reads the subset of msgpack the protocol uses (maps, arrays,
strings, binary, integers, floats, booleans, nil) and says so for anything else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_BYTES_PER_LINE = 12


@dataclass(frozen=True)
class Note:
    offset: int
    data: bytes
    meaning: str
    depth: int


def annotate(data: bytes) -> list[Note]:
    """Notes for one msgpack value that fills ``data`` exactly. Raises ValueError."""
    notes: list[Note] = []
    end = _value(data, 0, 0, notes)
    if end != len(data):
        raise ValueError(f"{len(data) - end} bytes after the value")
    return notes


def render(data: bytes) -> str:
    """The notes as a fixed-width listing: offset, bytes in hex, meaning."""
    lines = ["offset  bytes                                 meaning"]
    for note in annotate(data):
        chunks = [note.data[i:i + _BYTES_PER_LINE]
                  for i in range(0, len(note.data), _BYTES_PER_LINE)] or [b""]
        for index, chunk in enumerate(chunks):
            meaning = "  " * note.depth + note.meaning if index == 0 else ""
            offset = note.offset + index * _BYTES_PER_LINE
            lines.append(f"{offset:04x}    {chunk.hex(' '):<36}  {meaning}".rstrip())
    return "\n".join(lines)


def _value(data: bytes, at: int, depth: int, notes: list[Note]) -> int:
    """Append the notes of the value at ``at``; returns where it ends."""
    first = data[at]
    for reader in (_container, _text, _scalar):
        end = reader(data, at, first, depth, notes)
        if end is not None:
            return end
    raise ValueError(f"byte {first:#04x} at {at}: a msgpack type the protocol does not use")


def _container(data, at, first, depth, notes):
    if first & 0xF0 == 0x80 or first in (0xDE, 0xDF):
        kind, count, head = "map", *_count(data, at, first, 0x80, 0xDE)
    elif first & 0xF0 == 0x90 or first in (0xDC, 0xDD):
        kind, count, head = "array", *_count(data, at, first, 0x90, 0xDC)
    else:
        return None
    unit = "pairs" if kind == "map" else "items"
    notes.append(Note(at, data[at:at + head], f"{kind} of {count} {unit}", depth))
    at += head
    for _ in range(count * (2 if kind == "map" else 1)):
        at = _value(data, at, depth + 1, notes)
    return at


def _count(data: bytes, at: int, first: int, fix: int, sized16: int) -> tuple[int, int]:
    """(element count, header length) of a map or array header."""
    if first & 0xF0 == fix:
        return first & 0x0F, 1
    if first == sized16:
        return int.from_bytes(data[at + 1:at + 3], "big"), 3
    return int.from_bytes(data[at + 1:at + 5], "big"), 5


_SIZED = {0xD9: ("str 8", 1), 0xDA: ("str 16", 2), 0xDB: ("str 32", 4),
          0xC4: ("bin 8", 1), 0xC5: ("bin 16", 2), 0xC6: ("bin 32", 4)}


def _text(data, at, first, depth, notes):
    if first & 0xE0 == 0xA0:
        name, head, size = "fixstr", 1, first & 0x1F
    elif first in _SIZED:
        name, width = _SIZED[first]
        head, size = 1 + width, int.from_bytes(data[at + 1:at + 1 + width], "big")
    else:
        return None
    body = data[at + head:at + head + size]
    if name.startswith("bin"):
        shown = f"{size} bytes"
    else:
        text = body.decode("utf-8")
        shown = repr(text if len(text) <= 40 else text[:37] + "...")
    unit = "byte" if size == 1 else "bytes"
    notes.append(Note(at, data[at:at + head + size], f"{name} ({size} {unit}) {shown}", depth))
    return at + head + size


_NUMBERS = {0xCC: ("uint 8", ">B"), 0xCD: ("uint 16", ">H"), 0xCE: ("uint 32", ">I"),
            0xCF: ("uint 64", ">Q"), 0xD0: ("int 8", ">b"), 0xD1: ("int 16", ">h"),
            0xD2: ("int 32", ">i"), 0xD3: ("int 64", ">q"), 0xCA: ("float 32", ">f"),
            0xCB: ("float 64", ">d")}
_CONSTANTS = {0xC0: "nil (null)", 0xC2: "false", 0xC3: "true"}


def _scalar(data, at, first, depth, notes):
    if first < 0x80:
        notes.append(Note(at, data[at:at + 1], f"positive fixint {first}", depth))
        return at + 1
    if first >= 0xE0:
        notes.append(Note(at, data[at:at + 1], f"negative fixint {first - 0x100}", depth))
        return at + 1
    if first in _CONSTANTS:
        notes.append(Note(at, data[at:at + 1], _CONSTANTS[first], depth))
        return at + 1
    if first in _NUMBERS:
        name, layout = _NUMBERS[first]
        size = struct.calcsize(layout)
        value = struct.unpack(layout, data[at + 1:at + 1 + size])[0]
        notes.append(Note(at, data[at:at + 1 + size], f"{name} {value!r}", depth))
        return at + 1 + size
    return None
