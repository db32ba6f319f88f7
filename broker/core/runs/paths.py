"""Workflow stage paths: their syntax, and matching patterns against the stage tree.

A stage is addressed as ``workflow:<runId>/<stage>[/<child>...]``. This module owns

* the syntax of that text (:func:`parse_path`, :func:`looks_like_path`) and its one
  refusal, ``BusError("invalid_path")``;
* glob matching of one pattern segment against one spelling (:func:`segment_matches`);
* matching a pattern against a concrete path in the tree (:func:`matches`) and deciding
  whether a partial path can still lead to a match (:func:`matches_prefix`).

It knows nothing about runs, stages or sessions; callers walk their own tree and hand
in each concrete element as the collection of its spellings (display name, stage id,
nested run id, ...). A pattern segment matches an element if it matches ANY spelling.

Glob rules:

* ``*`` inside a segment matches any run of characters, possibly empty, within that one
  segment (``*``, ``rev*``, ``*-draft``, ``a*b*c``); everything else is literal and
  case-sensitive.
* ``**`` alone as a whole segment matches any number of elements, including zero.
  ``**`` embedded in a longer segment (``a**``) is refused by :func:`parse_path`.
* The run id is always literal.

Invariants:

* :func:`parse_path` either returns a path that satisfies every rule below or raises
  ``BusError("invalid_path", to=text, detail=...)``; it never raises anything else.
  Nothing is stripped or normalised, so ``str(parse_path(text)) == text``.
* ``matches(p, path)`` implies ``matches_prefix(p, path[:k])`` for every ``k``;
  ``matches_prefix(p, path)`` is True exactly when some extension of ``path`` (possibly
  the empty one) matches ``p``. Walks may therefore prune any subtree whose path fails
  :func:`matches_prefix` without losing a match.

Cost bound (no exponential backtracking on hostile patterns):

* :func:`segment_matches` is an iterative two-pointer scan that backtracks only to the
  most recent ``*``: O(len(pattern) * len(value)) worst case, O(len) without stars.
  No regular expression is ever built from user text.
* :func:`matches` / :func:`matches_prefix` run a DP over (pattern index, path index):
  the set of live pattern positions is advanced one path element at a time. That is at
  most P * N * S calls of :func:`segment_matches` (P pattern segments, N path elements,
  S spellings per element) and O(P) memory. With the limits below (P <= 32, segments
  <= 128 characters) one match is bounded by a small constant times N * S.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from schemas.errors import BusError
from schemas.groups import WORKFLOW_PREFIX
from schemas.limits import MAX_TARGET_CHARS

PREFIX = WORKFLOW_PREFIX
MAX_SEGMENTS = 32          # stage segments after the run id
MAX_SEGMENT_CHARS = 128    # one segment, and the run id

STAR = "*"
GLOBSTAR = "**"

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")   # Unicode category Cc


@dataclass(frozen=True, slots=True)
class WorkflowPath:
    """A parsed ``workflow:`` path; ``segments`` excludes the run id."""

    run_id: str
    segments: tuple[str, ...]

    @property
    def is_pattern(self) -> bool:
        """True if any segment holds a glob (``*`` or ``**``)."""
        return any(STAR in segment for segment in self.segments)

    def __str__(self) -> str:
        return PREFIX + "/".join((self.run_id, *self.segments))


def looks_like_path(text: str) -> bool:
    """True if ``text`` is meant as a workflow path (valid or not)."""
    return isinstance(text, str) and text.startswith(PREFIX)


def path_run(text: object) -> str | None:
    """The run id of a ``workflow:`` path; None for anything else."""
    try:
        return parse_path(text).run_id if text.__class__ is str else None
    except BusError:
        return None


def parse_path(text: str, *, allow_run_only: bool = False) -> WorkflowPath:
    """Parse ``workflow:<runId>/<segment>...``; raise BusError("invalid_path") if malformed.

    ``allow_run_only`` accepts ``workflow:<runId>`` with no stage segment.
    """

    def refuse(detail: str) -> BusError:
        return BusError("invalid_path", to=text, detail=detail)

    if not isinstance(text, str):
        raise refuse("not a string")
    if len(text) > MAX_TARGET_CHARS:
        raise refuse(f"longer than {MAX_TARGET_CHARS} characters")
    if _CONTROL.search(text):
        raise refuse("contains a control character")
    if not text.startswith(PREFIX):
        raise refuse(f"must start with {PREFIX!r}")

    run_id, *segments = text[len(PREFIX):].split("/")
    if not run_id:
        raise refuse("empty run id")
    if STAR in run_id:
        raise refuse("the run id must be literal (no '*')")
    _check_segment(run_id, "run id", refuse)

    if not segments:
        if allow_run_only:
            return WorkflowPath(run_id, ())
        raise refuse("no stage after the run id")
    if len(segments) > MAX_SEGMENTS:
        raise refuse(f"more than {MAX_SEGMENTS} segments")
    for index, segment in enumerate(segments, start=1):
        if not segment:
            raise refuse(f"segment {index} is empty")
        _check_segment(segment, f"segment {index}", refuse)
        if GLOBSTAR in segment and segment != GLOBSTAR:
            raise refuse(f"segment {index}: '**' must be a whole segment")
    return WorkflowPath(run_id, tuple(segments))


def _check_segment(segment: str, what: str, refuse) -> None:
    if len(segment) > MAX_SEGMENT_CHARS:
        raise refuse(f"{what} is longer than {MAX_SEGMENT_CHARS} characters")
    if not segment.strip():
        raise refuse(f"{what} is only whitespace")


def segment_matches(pattern: str, value: str) -> bool:
    """True if ``value`` matches glob ``pattern`` in full.

    ``*`` matches any run of characters (possibly empty); everything else is literal and
    case-sensitive. Consecutive stars act as one. O(len(pattern) * len(value)) worst case.
    """
    if STAR not in pattern:
        return pattern == value
    p_len, v_len = len(pattern), len(value)
    p = v = 0
    star = -1      # index of the last '*' seen in pattern
    resume = 0     # index in value where that star's current match ends
    while v < v_len:
        if p < p_len and pattern[p] == STAR:
            star, resume = p, v
            p += 1
        elif p < p_len and pattern[p] == value[v]:
            p += 1
            v += 1
        elif star >= 0:
            # Let the last star swallow one more character and retry after it. Earlier
            # stars never need revisiting: the last star can absorb anything they could.
            resume += 1
            p, v = star + 1, resume
        else:
            return False
    while p < p_len and pattern[p] == STAR:
        p += 1
    return p == p_len


def matches(pattern: Sequence[str], path: Sequence[Collection[str]]) -> bool:
    """True if the whole concrete ``path`` matches the ``pattern`` segments.

    Each path element is the collection of its spellings (a bare ``str`` counts as one
    spelling). ``**`` matches zero or more elements, any other segment exactly one.
    """
    live = _run(pattern, path)
    return live is not None and live[len(pattern)]


def matches_prefix(pattern: Sequence[str], path: Sequence[Collection[str]]) -> bool:
    """True if some extension of ``path`` (possibly none) could still match ``pattern``.

    Use it to prune a tree walk: a subtree whose path fails this can hold no match.
    Any live pattern position can be completed, since every segment matches at least
    the spelling obtained by deleting its stars.
    """
    return _run(pattern, path) is not None


def _run(pattern: Sequence[str], path: Sequence[Collection[str]]) -> list[bool] | None:
    """Advance the live pattern positions over ``path``; None once nothing is live.

    ``live[i]`` means ``path[:j]`` has been consumed by ``pattern[:i]``; ``live[P]`` is a
    full match. One row of the (pattern index, path index) DP per element.
    """
    size = len(pattern)
    live = [False] * (size + 1)
    live[0] = True
    _skip_globstars(pattern, live)
    for element in path:
        spellings = (element,) if isinstance(element, str) else element
        following = [False] * (size + 1)
        any_live = False
        for i in range(size):
            if not live[i]:
                continue
            segment = pattern[i]
            if segment == GLOBSTAR:
                following[i] = any_live = True
            elif any(segment_matches(segment, spelling) for spelling in spellings):
                following[i + 1] = any_live = True
        if not any_live:
            return None
        _skip_globstars(pattern, following)
        live = following
    return live


def _skip_globstars(pattern: Sequence[str], live: list[bool]) -> None:
    """Close ``live`` under '**' matching zero elements (one ascending pass suffices)."""
    for i, segment in enumerate(pattern):
        if live[i] and segment == GLOBSTAR:
            live[i + 1] = True
