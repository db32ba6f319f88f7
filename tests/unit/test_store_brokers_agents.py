"""The Store contract for what several brokers and agents' conversations keep: leases,
session claims, conversations, invoke jobs and response_recovery rows (both stores)."""

from __future__ import annotations

import pytest

from broker.core.kernel.records import (ClaimStale, ConversationDeleted, InvocationState, LeaseReleased,
                                 LeaseRenewed, RecoveryDeleted, RunSaved, SessionClaimed,
                                 SessionReleased)

from .store_helpers import (NOW, conversation, draft_row, identity, job, lease, open_store,  # noqa: F401
                            store)


# -- leases ------------------------------------------------------------------------------

def test_live_brokers_counts_unexpired_leases_and_leaves_out_the_excluded_one(store):
    store.apply([lease("me", NOW + 3000), lease("other", NOW + 3000), lease("dead", NOW - 1)])
    assert store.live_brokers(NOW) == 2
    assert store.live_brokers(NOW, exclude="me") == 1


def test_a_renewed_lease_counts_until_its_new_expiry(store):
    store.apply([lease("b1", NOW + 1000)])
    store.apply([lease("b1", NOW + 6000, started_at=NOW + 5000)])
    assert store.live_brokers(NOW + 3000) == 1


def test_a_lease_on_an_endpoint_replaces_a_dead_predecessors_row_there(store):
    store.apply([LeaseRenewed("old", 1, "ipc:///tmp/b.sock", NOW - 60, NOW + 3000)])
    store.apply([LeaseRenewed("new", 2, "ipc:///tmp/b.sock", NOW, NOW + 3000)])
    assert [row.broker_id for row in store.brokers(NOW)] == ["new"]
    assert store.live_brokers(NOW, exclude="new") == 0


def test_brokers_lists_the_live_rows_oldest_start_first(store):
    store.apply([lease("b2", NOW + 3000, started_at=NOW + 100), lease("b1", NOW + 3000),
                 lease("dead", NOW - 1)])
    assert [(row.broker_id, row.endpoint) for row in store.brokers(NOW, exclude="me")] == \
        [("b1", "ipc:///tmp/b1.sock"), ("b2", "ipc:///tmp/b2.sock")]


def test_a_lease_row_gives_back_the_curve_key_it_was_written_with(store):
    store.apply([LeaseRenewed("curved", 1, "ipc:///tmp/c.sock", NOW, NOW + 3000, "key-z85"),
                 lease("plain", NOW + 3000)])
    store.apply([LeaseRenewed("curved", 1, "ipc:///tmp/c.sock", NOW, NOW + 6000, "key-z85")])
    assert [(row.broker_id, row.curve_public) for row in store.brokers(NOW)] == \
        [("curved", "key-z85"), ("plain", "")]


def test_a_released_lease_is_no_longer_counted(store):
    store.apply([lease("b1", NOW + 3000), lease("b2", NOW + 3000)])
    store.apply([LeaseReleased("b1")])
    assert store.live_brokers(NOW, exclude="b2") == 0


# -- agents' conversations, invoke jobs, response recovery --------------------------------

def test_a_conversation_saved_again_keeps_its_place_with_the_latest_activity(store):
    store.apply([conversation("internal:a"), conversation("remote:x"),
                 conversation("internal:a", at=NOW + 5)])
    assert store.load().conversations == [conversation("internal:a", at=NOW + 5),
                                          conversation("remote:x")]


def test_unfinished_jobs_load_with_their_state_and_finished_ones_do_not(store):
    store.apply([job("j1"), job("j2"), job("j3"), InvocationState("j2", "started", NOW),
                 InvocationState("j3", "done", NOW), InvocationState("nope", "failed", NOW)])
    assert store.load().invocations == [job("j1"), job("j2", state="started")]


def test_a_job_id_stored_twice_fails_the_batch(store):
    store.apply([job("j1")])
    with pytest.raises(Exception):
        store.apply([job("j2"), job("j1")])
    assert [saved.id for saved in store.load().invocations] == ["j1"]


def test_a_job_is_started_once_store_wide_a_second_start_is_refused_and_the_batch_kept(store):
    store.apply([job("j1")])
    assert store.apply([InvocationState("j1", "started", NOW)]) == []
    refused = store.apply([InvocationState("j1", "started", NOW + 1), RunSaved("r1", {})])
    assert (refused, store.load().runs) == ([InvocationState("j1", "started", NOW + 1)],
                                           [RunSaved("r1", {})])
    assert store.load().invocations == [job("j1", state="started")]


def test_starting_a_finished_deleted_or_unknown_job_is_refused(store):
    store.apply([conversation("internal:b"), job("j1"), job("j2"),
                 InvocationState("j1", "started", NOW), InvocationState("j1", "done", NOW),
                 ConversationDeleted("lys", "internal:b")])
    starts = [InvocationState(i, "started", NOW) for i in ("j1", "j2", "nope")]
    assert store.apply(starts) == starts


def test_queued_jobs_lists_one_conversations_unstarted_jobs_oldest_first(store):
    store.apply([job("j1"), job("j2", "internal:c"), job("j3"), job("j4"),
                 InvocationState("j3", "started", NOW)])
    assert store.queued_jobs("lys", "internal:b") == [job("j1"), job("j4")]
    assert store.queued_jobs("ana", "internal:b") == []


def test_a_recovery_row_is_replaced_by_the_next_turn_and_reset_deletes_it(store):
    store.apply([draft_row(turn="t1"), draft_row(turn="t2", outcome="failed")])
    assert store.load().recoveries == [draft_row(turn="t2", outcome="failed")]
    store.apply([RecoveryDeleted("lys", "internal:b")])
    assert store.load().recoveries == []


def test_deleting_a_conversation_takes_its_recovery_row_and_queued_jobs_only(store):
    store.apply([conversation("internal:b"), conversation("internal:c"), draft_row(),
                 draft_row("internal:c"), job("j1"), job("j2"), job("j3", "internal:c"),
                 InvocationState("j2", "started", NOW)])
    store.apply([ConversationDeleted("lys", "internal:b")])
    snapshot = store.load()
    assert snapshot.conversations == [conversation("internal:c")]
    assert snapshot.recoveries == [draft_row("internal:c")]
    assert [saved.id for saved in snapshot.invocations] == ["j2", "j3"]


# -- session claims ----------------------------------------------------------------------

def test_an_id_held_by_a_live_broker_is_refused_to_another_and_the_rest_of_the_batch_kept(store):
    store.apply([lease("b1", NOW + 3000), lease("b2", NOW + 3000), SessionClaimed("x", "b1", NOW)])
    refused = store.apply([SessionClaimed("x", "b2", NOW), RunSaved("r1", {})])
    assert (refused, store.claims(), store.load().runs) == (
        [SessionClaimed("x", "b2", NOW)], {"x": "b1"}, [RunSaved("r1", {})])


def test_an_id_is_claimed_from_a_broker_whose_lease_ended_or_that_the_claimant_saw_die(store):
    # Judged by the store's clock (on PostgreSQL the server's, whatever ``at`` says).
    store.apply([lease("b1", NOW - 1), lease("b2", NOW + 30000), lease("b3", NOW + 30000),
                 SessionClaimed("x", "b1", NOW), SessionClaimed("y", "b2", NOW)])
    assert store.apply([SessionClaimed("x", "b3", NOW),
                        SessionClaimed("y", "b3", NOW, gone=["b2"])]) == []
    assert store.claims() == {"x": "b3", "y": "b3"}


def test_a_claim_with_a_secret_takes_the_id_only_if_its_identity_row_has_that_secret(store):
    store.apply([lease("b1", NOW + 3000), identity("x", NOW, "right")])
    wrong, unknown = SessionClaimed("x", "b1", NOW, token_hash="wrong"), \
        SessionClaimed("never-saved", "b1", NOW, token_hash="right")
    assert store.apply([wrong, unknown]) == [wrong, unknown] and store.claims() == {}
    assert store.apply([SessionClaimed("x", "b1", NOW, token_hash="right")]) == []
    assert store.claims() == {"x": "b1"}


def test_a_newer_hello_attempt_takes_an_id_from_a_live_holder_and_an_older_one_never(store):
    """One client's hellos (one instance) are ordered by their attempt: the newest wins
    the id, even from a live broker (the client moved there); a late one never takes it
    back, even from a broker the claimant saw die. Another instance is another process:
    the old rules alone decide (a live holder keeps the id)."""
    store.apply([lease("b1", NOW + 3000), lease("b2", NOW + 3000), lease("b3", NOW + 3000),
                 SessionClaimed("x", "b1", NOW, attempt=100, instance="i")])
    assert store.apply([SessionClaimed("x", "b2", NOW, attempt=200, instance="i")]) == []
    assert store.claims() == {"x": "b2"}
    late = SessionClaimed("x", "b3", NOW, gone=["b2"], attempt=150, instance="i")
    same = SessionClaimed("x", "b1", NOW, attempt=200, instance="i")
    other = SessionClaimed("x", "b1", NOW, attempt=900, instance="j")
    legacy = SessionClaimed("x", "b3", NOW)
    # The late one is told apart (ClaimStale: a stale hello, not a second process).
    assert store.apply([late, same, other, legacy]) == [ClaimStale(late), same, other, legacy]
    assert store.claims() == {"x": "b2"}
    # Another process takes it from a broker it saw die, whatever the attempts say ...
    assert store.apply([SessionClaimed("x", "b3", NOW, gone=["b2"], attempt=50,
                                       instance="j")]) == []
    # ... and from then on its attempts are the ones that count.
    older = SessionClaimed("x", "b1", NOW, gone=["b3"], attempt=49, instance="j")
    assert store.apply([older]) == [ClaimStale(older)] and store.claims() == {"x": "b3"}


def test_a_release_frees_only_the_releasing_brokers_claim(store):
    store.apply([lease("b1", NOW + 3000), lease("b2", NOW + 3000), SessionClaimed("x", "b1", NOW)])
    store.apply([SessionReleased("x", "b2")])
    assert store.claims() == {"x": "b1"}
    store.apply([SessionReleased("x", "b1")])
    assert store.apply([SessionClaimed("x", "b2", NOW)]) == [] and store.claims() == {"x": "b2"}


def test_a_lease_renewal_forgets_the_claims_of_brokers_without_a_row(store):
    store.apply([lease("b1", NOW + 3000), SessionClaimed("x", "b1", NOW), SessionClaimed("y", "b9", NOW)])
    store.apply([lease("b1", NOW + 6000)])
    assert store.claims() == {"x": "b1"}
