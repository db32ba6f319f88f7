"""What a model reads of the tools: every intercom action and parameter has a short
description, made from ``schemas/tools.py``, and nothing the spec's intercom table
names is left without one.

The spec (``intercom-reference.md``, "The intercom Tool": its parameters table and
its actions table) lives outside this repository, at ``../shared/spec/`` beside the
checkout, which CI does not have. So the names it lists are copied here
(:data:`SPEC_PARAMETERS`, :data:`SPEC_ACTIONS`): the checks run on the copy, and where
the spec file is there, a test parses its two tables and checks the copy still equals
them (a spec that grows a parameter or an action fails it until the copy follows).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from schemas.tools import ACTION_HELP, INTERCOM_ACTIONS, INTERCOM_SCHEMA, TOOL_SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT.parent / "shared" / "spec" / "intercom-reference.md"

# Copied from the spec's tables (see the module doc).
SPEC_PARAMETERS = ("action", "to", "message", "attachments", "replyTo", "group")
SPEC_ACTIONS = ("join", "leave", "groups", "list", "send", "ask", "reply", "pending", "status")

MIN_WORDS = 4          # a description says something, not just the name again


def spec_table(text: str, heading: str) -> list[str]:
    """The first column's names (backquoted) of the first table after ``heading``."""
    after = text.split(heading, 1)[1]
    names = []
    for line in after.splitlines()[1:]:
        if names and not line.startswith("|"):
            break
        match = re.match(r"\|\s*`([^`]+)`\s*\|", line)
        if match:
            names.append(match.group(1))
    return names


@pytest.mark.skipif(not SPEC.exists(), reason=f"the spec is not at {SPEC} (outside the "
                    "repository); the copied names are checked below either way")
def test_the_copied_names_are_the_spec_tables():
    text = SPEC.read_text(encoding="utf-8")
    assert tuple(spec_table(text, "## The intercom Tool")) == SPEC_PARAMETERS
    assert tuple(spec_table(text, "### Actions")) == SPEC_ACTIONS


def described(schema: dict) -> str:
    text = schema.get("description")
    assert isinstance(text, str) and len(text.split()) >= MIN_WORDS, schema
    return text


def test_every_parameter_the_spec_names_and_every_other_one_has_a_description():
    properties = INTERCOM_SCHEMA["properties"]
    assert set(SPEC_PARAMETERS) <= set(properties)
    for name, schema in properties.items():
        described(schema)
    for name, schema in INTERCOM_SCHEMA["properties"]["attachments"]["items"]["properties"].items():
        described(schema)


def test_the_action_description_has_a_sentence_for_each_action_the_spec_names():
    assert set(SPEC_ACTIONS) == set(INTERCOM_ACTIONS) == set(ACTION_HELP)
    text = described(INTERCOM_SCHEMA["properties"]["action"])
    for action in SPEC_ACTIONS:
        sentence = re.search(rf"(?:^|\. ){action}: ([^.]+)\.", text)
        assert sentence and len(sentence.group(1).split()) >= MIN_WORDS, (action, text)
    assert INTERCOM_SCHEMA["properties"]["action"]["enum"] == list(INTERCOM_ACTIONS)


def test_every_tool_and_each_of_its_parameters_is_described():
    for tool, schema in TOOL_SCHEMAS.items():
        described(schema)
        for name, sub in schema["properties"].items():
            assert len(described(sub)) <= 2000, (tool, name)


def test_the_mcp_server_lists_the_tools_with_these_descriptions():
    from client.mcp_server import tool_list      # here: the SDK costs a second to import

    tools = {tool.name: tool for tool in tool_list(with_agent=True)}
    assert set(tools) == set(TOOL_SCHEMAS)
    for name, tool in tools.items():
        assert tool.description == TOOL_SCHEMAS[name]["description"]
        for param, sub in TOOL_SCHEMAS[name]["properties"].items():
            assert tool.input_schema["properties"][param]["description"] == sub["description"]
