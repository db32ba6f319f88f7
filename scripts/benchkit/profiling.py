"""Where the time goes: cProfile of role processes (every thread) and its printout.

With ``--profile-roles DIR`` the parent sets ``BENCH_PROFILE_DIR``; each role process
then profiles itself (:class:`ThreadProfiles`; on each thread's CPU clock when
``BENCH_PROFILE_CPU=1`` is set too) and dumps ``DIR/<role>-<pid>.prof``, which
:func:`print_role_profiles` sums per role kind.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any


class ThreadProfiles:
    """cProfile of every thread of a role process (the client's IO thread included).

    ``threading.setprofile`` installs a Python hook in each new thread; its first call
    enables a fresh ``cProfile.Profile`` there, which replaces the hook.
    """

    def __init__(self) -> None:
        import cProfile
        import functools
        import os
        import time

        # BENCH_PROFILE_CPU=1: each thread's CPU clock instead of the wall clock, so a
        # blocking wait costs nothing and the times add up to CPU per operation.
        cpu = os.environ.get("BENCH_PROFILE_CPU") == "1"
        self._cls = functools.partial(cProfile.Profile, time.thread_time) if cpu else cProfile.Profile
        self.profiles = [self._cls()]
        threading.setprofile(self._start_in_thread)
        self.profiles[0].enable()

    def _start_in_thread(self, *_: Any) -> None:
        prof = self._cls()
        self.profiles.append(prof)
        prof.enable()

    def dump(self, path: Path) -> None:
        import pstats

        threading.setprofile(None)
        self.profiles[0].disable()
        stats = pstats.Stats(self.profiles[0])
        for prof in self.profiles[1:]:
            stats.add(prof)
        stats.dump_stats(str(path))


def print_role_profiles(directory: Path, top: int = 15) -> None:
    """Per role kind, the functions with the most internal time over all its processes."""
    import pstats

    by_role: dict[str, list[Path]] = {}
    for path in sorted(directory.glob("*.prof")):
        by_role.setdefault(path.stem.rsplit("-", 1)[0], []).append(path)
    for role, paths in by_role.items():
        if not role.startswith("bus_"):
            continue
        print(f"\n{role} profile ({len(paths)} process(es), all threads), top by internal time:")
        stats = pstats.Stats(*map(str, paths))
        stats.sort_stats("tottime").print_stats(top)


