"""Message ids the client picks for its requests."""

from __future__ import annotations

import os
import random

from schemas.uuids import v4_from_bits

# A generator of the client's own: the module-level one is shared with whatever else
# runs in the process, and test tools reseed it (hypothesis to the same seed for each
# example, pytest-randomly for each test), which would repeat ids; and drawing from it
# on the IO thread would disturb their reproducible runs.
_generator = random.Random()
_bits = _generator.getrandbits

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_generator.seed)    # a forked child draws anew


def new_message_id() -> str:
    """A random (version 4) UUID string, without uuid4()'s urandom call and UUID object.

    Message ids need to be unique, not secret: the generator (seeded from urandom,
    reseeded in forked children) gives 122 random bits like uuid4 does.
    """
    return v4_from_bits(_bits(128))
