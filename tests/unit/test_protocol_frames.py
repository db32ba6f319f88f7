"""pack_frames: envelopes in order, frames bounded by count and bytes, oversize left out."""

from schemas.limits import MAX_BATCH
from schemas.protocol import new_packer, pack_frames, unpack_frame


def test_frames_keep_order_and_stay_within_the_byte_budget():
    envs = [{"n": i, "text": "x" * 1000} for i in range(300)]
    frames, oversize = pack_frames(envs, batch_bytes=20_000, max_bytes=20_000)
    assert oversize == [] and len(frames) > 1
    assert all(len(f) <= 20_000 for f in frames)
    assert [env for f in frames for env in unpack_frame(f)] == envs


def test_a_frame_holds_at_most_max_batch_envelopes():
    envs = [{"n": i} for i in range(MAX_BATCH * 2 + 1)]
    frames, _ = pack_frames(envs, encode=new_packer())
    assert [len(unpack_frame(f)) for f in frames] == [MAX_BATCH, MAX_BATCH, 1]


def test_an_envelope_larger_than_the_limit_is_returned_not_packed():
    big = {"text": "y" * 5000}
    frames, oversize = pack_frames([{"a": 1}, big, {"b": 2}], max_bytes=1000)
    assert oversize == [big]
    assert [env for f in frames for env in unpack_frame(f)] == [{"a": 1}, {"b": 2}]
    assert pack_frames([big], max_bytes=1000) == ([], [big])
