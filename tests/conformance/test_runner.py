"""The scenario runner's own rules: substitution and matching (no driver, no broker)."""

from __future__ import annotations

from .runner import match, substitute


def test_a_whole_variable_keeps_its_type_and_inner_variables_resolve_first():
    variables = {"u": "ab", "run": {"grants": {"workflow:run-ab/a": "g1"}}, "n": 5}
    assert substitute("${n}", variables) == 5
    assert substitute("x-${u}", variables) == "x-ab"
    assert substitute("${run.grants.workflow:run-${u}/a}", variables) == "g1"
    assert substitute({"k-${u}": ["${n}"]}, variables) == {"k-ab": [5]}
    assert substitute({"$repeat": ["é", 3]}, variables) == "ééé"


def test_maps_must_have_exactly_the_expected_keys_unless_partial():
    assert match({"ok": True}, {"ok": True}) == []
    assert match({"ok": True}, {"ok": True, "extra": 1}) == ["result: unexpected keys ['extra']"]
    assert match({"ok": True, "...": True}, {"ok": True, "extra": 1}) == []
    assert match({"gone": {"$absent": True}, "...": True}, {"gone": 1})
    assert match({"a": 1}, {}) == ["result.a: missing (have [])"]


def test_scalars_compare_by_value_and_booleans_are_not_numbers():
    assert match(600, 600.0) == []
    assert match(1, True) != []
    assert match(9007199254740993, 9007199254740992) != []
    assert match([1, 2], [1, 2, 3]) != []


def test_matchers_by_type_pattern_and_containment():
    assert match({"$type": "integer"}, 3) == []
    assert match({"$type": "integer"}, True) != []
    assert match({"$re": "^a+$"}, "aaa") == []
    assert match({"$re": "^a+$"}, "ab") != []
    assert match({"$contains": [{"n": 1, "...": True}]}, [{"n": 2}, {"n": 1, "m": 0}]) == []
    assert match({"$contains": [{"n": 3}]}, [{"n": 2}]) != []


def test_the_python_driver_runs_on_the_suites_interpreter_not_a_python3_from_path(tmp_path):
    """A venv that is not activated: the ``python3`` on PATH is another interpreter
    (here one that only fails). The driver still starts, on sys.executable, and answers."""
    import os
    import stat

    from .runner import Driver

    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho 'not the suite interpreter' >&2\nexit 97\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    driver = Driver("python", env)
    try:
        request = driver.send("connect", "a", {"name": "a", "endpoint": f"ipc://{tmp_path}/none.sock",
                                               "autoStart": False, "timeout": 5})
        answer = driver.wait(request, 30)
        assert answer["ok"] is False and answer["code"] == "no_broker", answer
    finally:
        driver.close()
