"""List rows lead with what a reader copies, then status, then working directory (the
spec's order for agent rows); names and the rest come after."""

from __future__ import annotations

from tests.unit.harness import Bus


def test_session_rows_lead_with_id_status_and_working_directory():
    bus = Bus()
    bus.hello("alice", cwd="/src/a")
    bus.hello("bob", cwd="/src/b")
    (row,) = [r for r in bus.call(b"alice", "list")["sessions"] if r["name"] == "bob"]
    assert list(row)[:4] == ["id", "status", "cwd", "name"]
    assert (row["status"], row["cwd"]) == ("idle", "/src/b")


def test_stage_rows_lead_with_their_path_status_and_their_sessions_directory():
    bus = Bus()
    bus.hello("host")
    bus.workflow(b"host", "register_run", runId="r1", stages=[{"name": "plan"}, {"name": "review"}])
    bus.hello("plan", sessionKind="stage", stage="workflow:r1/plan", cwd="/work/plan")
    (run,) = bus.call(b"host", "list")["workflows"]
    rows = {r["name"]: r for r in run["stages"]}
    assert list(rows["plan"])[:3] == ["target", "status", "cwd"]
    assert (rows["plan"]["target"], rows["plan"]["cwd"]) == ("workflow:r1/plan", "/work/plan")
    assert rows["plan"]["status"] == rows["plan"]["label"]
    assert rows["review"]["cwd"] is None and rows["review"]["status"] == "PENDING"
