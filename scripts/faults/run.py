"""The fault harness's entry point: rounds of faults against brokers on PostgreSQL
across network namespaces, judged by the checker, printed as one table.

Usage (as root): python3 scripts/faults/run.py [--faults a,b,...] [--repeats 2]
                     [--seconds 60] [--brokers 3] [--keep DIR]

Faults (see faults/nemesis.py): a broker cut from PostgreSQL (a), from the other
brokers (b), its clients cut from it (c, 6 s), paused past its lease (d), PostgreSQL
killed (e), a minority split (f), a broker killed in a partition (g), clock skew (h);
run when none are named. Named only: its clients cut from it for 2, 5 or 10 s (c2,
c5, c10), for the live sends answered delivered to a receiver cut off meanwhile:

    python3 scripts/faults/run.py --faults c2,c5,c10 --repeats 1 --brokers 3

With --brokers 1 (faults a, c*, d, e, h), the live role's senders run on a host of
their own that no fault cuts, so a cut of the clients' host cuts only the receivers.
Rounds that cut the clients add a column: the live sends made during the cut to the
receivers homed on b1, answered delivered / received.

Each round is a fresh bus (a schema of its own on one server) with its own traffic.
Exit status: 0 when every invariant held in every round, 1 when one failed, 2 when
the harness could not run.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

if __package__ in (None, ""):     # run as a script: make "faults" and the project importable
    ROOT = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from faults.nemesis import DEFAULT, FAULTS  # noqa: E402
from faults.net import NetworkError  # noqa: E402
from faults.rounds import Round, Timing, open_testbed, play, summary  # noqa: E402

NEED_OTHERS = ("b", "f", "g")      # faults that cut b1 from the other brokers

COLUMNS = ["fault", "answered queued", "lost", "doubled", "two brokers holding one run (s)",
           "ids lost", "delivered-not-received", "hung", "jobs started twice",
           "unavailable s (per side)", "during the cut: to cut receivers, delivered / received"]


def row(round_: Round) -> list[str]:
    s = summary(round_)
    sides = ", ".join(f"{k} {v:g}" for k, v in s["unavailable_s"].items()) or "0"
    return [f"{s['fault']}: {round_.fault.title}", str(s["queued"]), str(s["lost"]),
            str(s["doubled"]), f"{s['two_holders_s']:g}", str(s["ids_lost"]),
            _not_received(round_.verdict), str(s["hung"]), str(s["jobs_started_twice"]), sides,
            f"{s['cut']['delivered']} / {s['cut']['received']}" if s.get("cut") else "-"]


def _not_received(v) -> str:
    """The count, and how many of them went to workflow stages (not named sessions)."""
    stages = sum(n for t, n in v.delivered_not_received_by_target.items()
                 if (t or "").startswith("workflow:"))
    return f"{len(v.delivered_not_received)}" + (f" ({stages} to stages)" if stages else "")


def table(rounds: list[Round]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in rounds]
    return "\n".join(lines)


def details(round_: Round, lease_s: float) -> str:
    v = round_.verdict
    out = [f"### {round_.fault.letter}: {round_.fault.title}"]
    out += [f"  set-up: {note}" for note in round_.notes]
    out += [f"  {t:6.1f} s  {what}" for t, what in round_.timeline]
    out.append(f"  drain waited {round_.drained_s:.1f} s; files in {round_.files}")
    sides = ", ".join(f"{k} {s:.1f} s" for k, s in sorted(v.unavailable_s.items()))
    out.append(f"  longest refusals in a row per side (lease {lease_s:g} s): {sides or 'none'}")
    slowest = ", ".join(f"{k} {s:.1f} s" for k, s in sorted(v.slowest_s.items()))
    out.append(f"  longest call per side: {slowest}")
    for title, found in (("lost", v.lost), ("doubled", v.doubled),
                         ("two brokers holding one run", v.two_holders), ("ids lost", v.ids_lost),
                         ("delivered, not received", v.delivered_not_received), ("hung", v.hung),
                         ("jobs started twice", v.jobs_twice)):
        if found:
            shown = ", ".join(found[:8]) + (f", ... ({len(found)} in all)" if len(found) > 8 else "")
            out.append(f"  {title}: {shown}")
    if v.delivered_not_received_by_target:
        out.append("  delivered, not received, by target: " + ", ".join(
            f"{t} {n}" for t, n in v.delivered_not_received_by_target.most_common()))
    if v.lost_by_target:
        out.append("  lost, by target: " + ", ".join(f"{t} {n}" for t, n in v.lost_by_target.most_common()))
    jobs = f"  invoke jobs: {v.jobs_queued} answered queued, {v.jobs_started} started"
    for title, found in (("never started", v.jobs_not_started),
                         ("started, invoke answered otherwise", v.jobs_unanswered)):
        if found:
            jobs += f"; {title} {len(found)}: " + ", ".join(found[:8]) + (", ..." if len(found) > 8 else "")
    out.append(jobs)
    if v.cut is not None:
        out += cut_details(v.cut, round_.started)
    if v.disconnected:
        out.append("  sessions not connected at the end: " + ", ".join(v.disconnected))
    out.append("  answers: " + ", ".join(f"{k} {n}" for k, n in sorted(v.codes.items())))
    return "\n".join(out)


def cut_details(cut, started: float) -> list[str]:
    """What the live sends made during a clients' cut became (checker.CutSends)."""
    out = [f"  live sends during the cut ({cut.start - started:.1f}-{cut.end - started:.1f} s) "
           f"to receivers homed on {cut.broker} ({', '.join(cut.receivers) or 'none'}): "
           f"{cut.made} made, {cut.delivered} answered delivered"
           + "".join(f", {n} {code}" for code, n in cut.answers.most_common())
           + f"; {cut.received} of those received ({cut.after_heal} after the heal, via "
           + (", ".join(f"{b} {n}" for b, n in cut.via.most_common()) or "none")
           + f"), slowest {cut.slowest_s:.1f} s from send to receipt"]
    if not cut.made:
        out.append("  NO live send was made to a cut receiver during the cut: the round says "
                   "nothing about them")
    out += [f"  receiver moved: {move}" for move in cut.moves]
    out.append(f"  copies the receivers' clients dropped (sent again): {cut.copies_dropped}")
    if cut.not_received:
        out.append("  of those, answered delivered and not received: " + ", ".join(cut.not_received[:8]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", default=",".join(DEFAULT),
                        help=f"comma-separated, of {', '.join(FAULTS)} (default {','.join(DEFAULT)})")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=60.0, help="traffic per round")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--hold", type=float, default=20.0, help="seconds a fault holds")
    parser.add_argument("--keep", type=Path, help="keep the histories in this new directory")
    args = parser.parse_args(argv)
    letters = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in letters if f not in FAULTS]
    if unknown:
        parser.error(f"unknown faults {unknown}")
    needing = [f for f in letters if f in NEED_OTHERS]
    if args.brokers < 1 or (args.brokers == 1 and needing):
        parser.error(f"--brokers: at least 1, and at least 2 for faults {', '.join(NEED_OTHERS)}")
    # SIGTERM unwinds like Ctrl-C, so every namespace and process is removed.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    timing = Timing(seconds=args.seconds, hold_s=args.hold)
    rounds: list[Round] = []
    try:
        with open_testbed(args.brokers, root=_kept(args.keep)) as bed:
            for repeat in range(args.repeats):
                for letter in letters:
                    print(f"round {len(rounds) + 1}: fault {letter} ({FAULTS[letter].title}), "
                          f"repeat {repeat + 1}", flush=True)
                    rounds.append(play(bed, FAULTS[letter], timing))
                    print(details(rounds[-1], timing.lease_s), flush=True)
    except (NetworkError, RuntimeError) as exc:
        print(f"faults: cannot run: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("faults: interrupted; everything started was removed", file=sys.stderr)
        return 2
    finally:
        if rounds:
            print()
            print(table(rounds))
    failed = [r for r in rounds if r.verdict.failed]
    for r in failed:
        print(f"fault {r.fault.letter}: failed {', '.join(r.verdict.failed)}")
    return 1 if failed else 0


def _kept(keep: Path | None) -> Path | None:
    if keep is None:
        return None
    keep.mkdir(parents=True)
    return keep


if __name__ == "__main__":
    sys.exit(main())
