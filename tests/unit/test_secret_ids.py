"""The broker's own ids and tokens, and its check of an id a client asks for."""

import uuid

from broker.core.kernel.secret_ids import new_hex_id, new_session_id, new_token
from schemas.uuids import is_uuid


def test_a_session_id_is_a_canonical_version_4_uuid_and_never_repeats():
    ids = {new_session_id() for _ in range(2000)}
    assert len(ids) == 2000
    for value in list(ids)[:200]:
        parsed = uuid.UUID(value)
        assert str(parsed) == value and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_a_token_is_256_random_bits_in_hex():
    tokens = {new_token() for _ in range(500)}
    assert len(tokens) == 500 and all(len(t) == 64 and int(t, 16) >= 0 for t in tokens)


def test_hex_ids_have_the_length_asked_for():
    assert [len(new_hex_id(n)) for n in (1, 12, 32)] == [1, 12, 32]


def test_is_uuid_takes_the_canonical_form_in_either_case_and_nothing_else():
    value = "0f8fad5b-d9cb-469f-a165-70867728950e"
    assert is_uuid(value) and is_uuid(value.upper())
    for other in (value[:-1], value + "\n", "{" + value + "}", "urn:uuid:" + value,
                  value.replace("-", ""), value.replace("0", "g"), "", "x" * 36):
        assert not is_uuid(other), other
