"""Workflow path syntax and glob matching (broker.core.runs.paths)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.core.runs import paths
from broker.core.runs.paths import (
    MAX_SEGMENT_CHARS,
    MAX_SEGMENTS,
    PREFIX,
    WorkflowPath,
    looks_like_path,
    matches,
    matches_prefix,
    parse_path,
    segment_matches,
)
from schemas.errors import BusError
from schemas.limits import MAX_TARGET_CHARS


def refusal(text, **kwargs) -> BusError:
    with pytest.raises(BusError) as caught:
        parse_path(text, **kwargs)
    assert caught.value.code == "invalid_path"
    assert caught.value.fields["to"] == text
    return caught.value


def segs(text: str) -> tuple[str, ...]:
    return parse_path(text).segments


def concrete(*names: str) -> list[frozenset[str]]:
    return [frozenset({name}) for name in names]


# -- parse_path: valid -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "workflow:r/a",
        "workflow:run-1/build/review",
        "workflow:r/*",
        "workflow:r/**",
        "workflow:r/rev*/*-draft/a*b*c",
        "workflow:r/**/c",
        "workflow:r1/build/r2/test",
        "workflow:r/stage with spaces",
        "workflow:r/ünïcode/段",
        "workflow:r/" + "/".join(["s"] * MAX_SEGMENTS),
        "workflow:" + "r" * MAX_SEGMENT_CHARS + "/" + "s" * MAX_SEGMENT_CHARS,
    ],
)
def test_valid_paths_round_trip_through_str(text):
    assert str(parse_path(text)) == text


def test_parse_splits_run_id_and_segments():
    assert parse_path("workflow:r1/build/r2/*") == WorkflowPath("r1", ("build", "r2", "*"))


def test_run_only_path_is_accepted_when_allowed_and_round_trips():
    parsed = parse_path("workflow:r1", allow_run_only=True)
    assert parsed == WorkflowPath("r1", ())
    assert str(parsed) == "workflow:r1"


def test_is_pattern_is_true_only_when_a_segment_has_a_star():
    assert parse_path("workflow:r/a*").is_pattern
    assert parse_path("workflow:r/a/**").is_pattern
    assert not parse_path("workflow:r/a/b").is_pattern
    assert not parse_path("workflow:r", allow_run_only=True).is_pattern


def test_surrounding_whitespace_is_kept_not_stripped():
    assert segs("workflow:r/a ") == ("a ",)
    assert segs("workflow:r/ a") == (" a",)


def test_path_of_exactly_max_target_chars_is_accepted():
    body = "/".join(["x" * 100] * 5)
    text = PREFIX + "r/" + body
    text = text[:MAX_TARGET_CHARS]
    assert not text.endswith("/")
    assert len(text) == MAX_TARGET_CHARS
    assert str(parse_path(text)) == text


def test_looks_like_path_checks_only_the_prefix():
    assert looks_like_path("workflow:r/a")
    assert looks_like_path("workflow:")
    assert not looks_like_path("Workflow:r/a")
    assert not looks_like_path(" workflow:r/a")
    assert not looks_like_path("alice")


# -- parse_path: each invalid class ----------------------------------------------------


def test_missing_prefix_is_invalid():
    assert "workflow:" in refusal("r/a").fields["detail"]
    refusal("workflow/r/a")


def test_leading_whitespace_before_prefix_is_invalid():
    assert "workflow:" in refusal(" workflow:r/a").fields["detail"]


def test_empty_run_id_is_invalid():
    assert "empty run id" in refusal("workflow:/a").fields["detail"]
    refusal("workflow:", allow_run_only=True)


def test_star_in_run_id_is_invalid():
    assert "run id" in refusal("workflow:r*/a").fields["detail"]
    refusal("workflow:*/a")
    refusal("workflow:**/a")


def test_whitespace_only_run_id_is_invalid():
    assert "whitespace" in refusal("workflow: /a").fields["detail"]


def test_run_id_longer_than_limit_is_invalid():
    assert "run id" in refusal("workflow:" + "r" * (MAX_SEGMENT_CHARS + 1) + "/a").fields["detail"]


def test_missing_stage_is_invalid_unless_run_only_allowed():
    assert "no stage" in refusal("workflow:r").fields["detail"]


def test_double_slash_is_an_empty_segment():
    assert "empty" in refusal("workflow:r/a//b").fields["detail"]


def test_trailing_slash_is_an_empty_segment():
    assert "empty" in refusal("workflow:r/a/").fields["detail"]
    refusal("workflow:r/", allow_run_only=True)


def test_segment_longer_than_limit_is_invalid():
    error = refusal("workflow:r/" + "s" * (MAX_SEGMENT_CHARS + 1))
    assert str(MAX_SEGMENT_CHARS) in error.fields["detail"]


def test_more_than_max_segments_is_invalid():
    text = "workflow:r/" + "/".join(["s"] * (MAX_SEGMENTS + 1))
    assert str(MAX_SEGMENTS) in refusal(text).fields["detail"]


def test_whitespace_only_segment_is_invalid():
    assert "whitespace" in refusal("workflow:r/a/ ").fields["detail"]
    refusal("workflow:r/   /b")
    refusal("workflow:r/\u00a0")


@pytest.mark.parametrize("char", ["\x00", "\t", "\n", "\r", "\x1b", "\x7f", "\x85"])
def test_control_character_is_invalid(char):
    assert "control" in refusal(f"workflow:r/a{char}b").fields["detail"]
    refusal(f"workflow:r{char}/a")
    refusal(f"workflow:r/a{char}")


@pytest.mark.parametrize("segment", ["a**", "**a", "a**b", "***", "*-**"])
def test_globstar_embedded_in_a_longer_segment_is_invalid(segment):
    assert "**" in refusal(f"workflow:r/{segment}").fields["detail"]


def test_text_longer_than_max_target_chars_is_invalid():
    text = "workflow:r/" + "/".join(["x" * 100] * 6)
    assert len(text) > MAX_TARGET_CHARS
    assert str(MAX_TARGET_CHARS) in refusal(text).fields["detail"]


def test_non_string_is_invalid():
    with pytest.raises(BusError) as caught:
        parse_path(None)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_path"


def test_refusal_text_names_the_path_and_the_reason():
    error = refusal("workflow:r/a//b")
    assert error.text.startswith("'workflow:r/a//b' is not a valid workflow path: ")


@settings(max_examples=300)
@given(st.one_of(st.text(max_size=60), st.text(max_size=60).map(lambda t: PREFIX + t)))
def test_parse_either_refuses_with_invalid_path_or_round_trips(text):
    try:
        parsed = parse_path(text)
    except BusError as error:
        assert error.code == "invalid_path"
    else:
        assert str(parsed) == text
        assert 1 <= len(parsed.segments) <= MAX_SEGMENTS


# -- segment_matches -------------------------------------------------------------------


def test_star_matches_empty_and_any_text():
    assert segment_matches("*", "")
    assert segment_matches("*", "anything at all")


def test_embedded_star_matches_prefix_suffix_and_infix():
    assert segment_matches("rev*", "review")
    assert segment_matches("rev*", "rev")
    assert segment_matches("*-draft", "v2-draft")
    assert segment_matches("a*b*c", "abc")
    assert segment_matches("a*b*c", "aXXbYYc")
    assert not segment_matches("a*b*c", "acb")
    assert not segment_matches("rev*", "prereview")


def test_literal_segment_needs_exact_equality():
    assert segment_matches("build", "build")
    assert not segment_matches("build", "builds")
    assert not segment_matches("build", "buil")
    assert not segment_matches("", "x")
    assert segment_matches("", "")


def test_segment_matching_is_case_sensitive():
    assert not segment_matches("Build", "build")
    assert not segment_matches("REV*", "review")


def test_only_star_is_special_in_a_segment():
    assert segment_matches("a?c", "a?c")
    assert not segment_matches("a?c", "abc")
    assert segment_matches("[ab]", "[ab]")
    assert not segment_matches("[ab]", "a")
    assert segment_matches("a.c", "a.c") and not segment_matches("a.c", "abc")


def test_star_in_the_value_is_literal():
    assert segment_matches("a*", "a*")
    assert not segment_matches("a", "*")


def reference_segment_matches(pattern: str, value: str) -> bool:
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, value, flags=re.DOTALL) is not None


@settings(max_examples=500)
@given(st.text(alphabet="ab*", max_size=8), st.text(alphabet="ab", max_size=10))
def test_segment_matches_agrees_with_regex_reference(pattern, value):
    assert segment_matches(pattern, value) == reference_segment_matches(pattern, value)


@settings(max_examples=200)
@given(st.text(alphabet="ab*", max_size=8))
def test_segment_matches_its_own_text_with_stars_removed(pattern):
    assert segment_matches(pattern, pattern.replace("*", ""))


# -- matches ---------------------------------------------------------------------------


def test_single_star_matches_exactly_one_element():
    pattern = segs("workflow:r/*")
    assert matches(pattern, concrete("a"))
    assert not matches(pattern, concrete())
    assert not matches(pattern, concrete("a", "b"))


def test_star_in_the_middle_does_not_cross_levels():
    pattern = segs("workflow:r/a/*/c")
    assert matches(pattern, concrete("a", "b", "c"))
    assert not matches(pattern, concrete("a", "c"))
    assert not matches(pattern, concrete("a", "b", "b", "c"))


def test_lone_globstar_matches_every_stage():
    pattern = segs("workflow:r/**")
    for depth in range(0, 6):
        assert matches(pattern, concrete(*("s%d" % i for i in range(depth))))


def test_globstar_in_the_middle_matches_zero_or_more_elements():
    pattern = segs("workflow:r/a/**/c")
    assert matches(pattern, concrete("a", "c"))
    assert matches(pattern, concrete("a", "b", "c"))
    assert matches(pattern, concrete("a", "b", "b", "c"))
    assert not matches(pattern, concrete("a", "b"))
    assert not matches(pattern, concrete("b", "c"))
    assert not matches(pattern, concrete("a", "c", "d"))


def test_leading_globstar_finds_a_stage_at_any_depth():
    pattern = segs("workflow:r/**/review")
    assert matches(pattern, concrete("review"))
    assert matches(pattern, concrete("build", "sub", "review"))
    assert not matches(pattern, concrete("build", "review", "after"))


def test_element_matches_by_any_spelling():
    path = [frozenset({"Build", "stg-01"}), frozenset({"Review", "stg-02"})]
    assert matches(["Build", "Review"], path)
    assert matches(["stg-01", "stg-02"], path)
    assert matches(["Build", "stg-02"], path)
    assert matches(["stg-*", "Rev*"], path)
    assert not matches(["Build", "stg-03"], path)


def test_nested_run_id_segments_mix_with_stage_names():
    # Stage "build" (id s1) of run r1 spawned run r2, whose stage "review" has id s7.
    path = [frozenset({"build", "s1"}), frozenset({"r2"}), frozenset({"review", "s7"})]
    assert matches(segs("workflow:r1/build/r2/review"), path)
    assert matches(segs("workflow:r1/s1/r2/s7"), path)
    assert matches(segs("workflow:r1/**/r2/*"), path)
    assert matches(segs("workflow:r1/*/r*/rev*"), path)
    assert not matches(segs("workflow:r1/build/r3/review"), path)
    assert not matches(segs("workflow:r1/build/review"), path)


def test_bare_string_element_counts_as_one_spelling():
    assert matches(["abc"], ["abc"])
    assert not matches(["a"], ["abc"])


def test_element_with_no_spellings_matches_only_globstar():
    assert not matches(["*"], [frozenset()])
    assert matches(["**"], [frozenset()])


def test_empty_pattern_matches_only_the_empty_path():
    assert matches([], [])
    assert not matches([], concrete("a"))


# -- matches_prefix --------------------------------------------------------------------


def test_prefix_of_a_possible_match_is_viable():
    pattern = segs("workflow:r/a/*/c")
    assert matches_prefix(pattern, concrete())
    assert matches_prefix(pattern, concrete("a"))
    assert matches_prefix(pattern, concrete("a", "b"))
    assert matches_prefix(pattern, concrete("a", "b", "c"))


def test_prefix_that_diverges_is_pruned():
    pattern = segs("workflow:r/a/*/c")
    assert not matches_prefix(pattern, concrete("b"))
    assert not matches_prefix(pattern, concrete("a", "b", "d"))
    assert not matches_prefix(pattern, concrete("a", "b", "c", "d"))


def test_globstar_keeps_every_prefix_viable():
    pattern = segs("workflow:r/a/**/c")
    assert matches_prefix(pattern, concrete("a", "x", "y", "z"))
    assert not matches_prefix(pattern, concrete("x"))


# -- property tests against slow references --------------------------------------------

SEGMENTS = ["a", "b", "*", "**", "a*", "*b", "b*a"]
SPELLINGS = ["a", "b", "ab", "ba", "bba", ""]

patterns = st.lists(st.sampled_from(SEGMENTS), max_size=5)
elements = st.frozensets(st.sampled_from(SPELLINGS), min_size=1, max_size=2)
concrete_paths = st.lists(elements, max_size=6)


def reference_matches(pattern, path) -> bool:
    """Plain exponential recursion: the obvious definition."""
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return reference_matches(rest, path) or (bool(path) and reference_matches(pattern, path[1:]))
    return (
        bool(path)
        and any(reference_segment_matches(head, spelling) for spelling in path[0])
        and reference_matches(rest, path[1:])
    )


def reference_prefix(pattern, path) -> bool:
    """Like reference_matches, but running out of path before pattern is a success."""
    if not path:
        return True
    if not pattern:
        return False
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return reference_prefix(rest, path) or reference_prefix(pattern, path[1:])
    return any(reference_segment_matches(head, s) for s in path[0]) and reference_prefix(rest, path[1:])


@settings(max_examples=500)
@given(patterns, concrete_paths)
def test_matches_agrees_with_recursive_reference(pattern, path):
    assert matches(pattern, path) == reference_matches(pattern, path)


@settings(max_examples=500)
@given(patterns, concrete_paths)
def test_matches_prefix_agrees_with_recursive_reference(pattern, path):
    assert matches_prefix(pattern, path) == reference_prefix(pattern, path)


@settings(max_examples=500)
@given(patterns, concrete_paths)
def test_every_prefix_of_a_match_is_viable(pattern, path):
    if matches(pattern, path):
        for k in range(len(path) + 1):
            assert matches_prefix(pattern, path[:k])


@settings(max_examples=300)
@given(patterns, concrete_paths, concrete_paths)
def test_a_matching_extension_implies_the_prefix_is_viable(pattern, path, extension):
    if matches(pattern, path + extension):
        assert matches_prefix(pattern, path)


@settings(max_examples=300)
@given(st.lists(st.sampled_from(SEGMENTS), max_size=4), concrete_paths)
def test_viable_prefix_has_a_matching_extension(pattern, path):
    """matches_prefix is exact: when it says yes, some extension really matches."""
    if not matches_prefix(pattern, path):
        return
    witnesses = sorted({segment.replace("*", "") for segment in pattern} | {"a"})
    found = any(
        matches(pattern, path + [frozenset({w}) for w in extension])
        for length in range(len(pattern) + 1)
        for extension in itertools.product(witnesses, repeat=length)
    )
    assert found


# -- adversarial cost bound ------------------------------------------------------------


@pytest.mark.timeout(2)
def test_many_stars_against_a_long_run_is_fast():
    pattern = "*a" * 10 + "*b"
    assert not segment_matches(pattern, "a" * 120)
    assert segment_matches(pattern, "a" * 120 + "b")
    worst = "*" + "a*" * 63 + "b"
    assert len(worst) <= MAX_SEGMENT_CHARS
    assert not segment_matches(worst, "a" * MAX_SEGMENT_CHARS)


@pytest.mark.timeout(2)
def test_many_globstars_against_a_deep_non_matching_path_is_fast():
    pattern = ["**"] * 30 + ["z"]
    path = [frozenset({"a", "b"})] * MAX_SEGMENTS
    assert not matches(pattern, path)
    assert matches_prefix(pattern, path)
    interleaved = segs("workflow:r/" + "/".join(["**", "a*"] * 15 + ["z"]))
    assert not matches(interleaved, path)


def test_match_calls_segment_matches_at_most_once_per_pattern_segment_element_and_spelling(
    monkeypatch,
):
    calls = 0
    real = paths.segment_matches

    def counting(pattern, value):
        nonlocal calls
        calls += 1
        return real(pattern, value)

    monkeypatch.setattr(paths, "segment_matches", counting)
    pattern = ["**", "*a"] * 15 + ["z"]
    path = [frozenset({"ba", "ca"})] * MAX_SEGMENTS
    assert not paths.matches(pattern, path)
    assert calls <= len(pattern) * len(path) * 2

