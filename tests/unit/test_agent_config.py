"""Per-agent settings files: strict, whole-or-nothing per file, never fatal."""

from __future__ import annotations

from schemas.agent_config import AgentSettings, load_agent, load_agents


def write(base, agent: str, name: str, text: str) -> None:
    config = base / "agents" / agent / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / name).write_text(text)


def test_both_files_give_the_owner_and_invoke(tmp_path):
    write(tmp_path, "lys", "agent.toml", 'ownerId = "discord:123|456"\n')
    write(tmp_path, "lys", "tools.toml", "invoke = true\n")
    assert load_agents(tmp_path / "agents") == ({"lys": AgentSettings("discord:123|456", True)}, [])


def test_missing_files_and_a_missing_directory_mean_defaults_without_error(tmp_path):
    (tmp_path / "agents" / "ana").mkdir(parents=True)
    assert load_agents(tmp_path / "agents") == ({"ana": AgentSettings()}, [])
    assert load_agents(tmp_path / "nothing") == ({}, [])


def test_an_unknown_key_rejects_that_file_whole_with_one_error(tmp_path):
    write(tmp_path, "lys", "tools.toml", "invoke = true\nrespond = false\n")
    write(tmp_path, "lys", "agent.toml", 'ownerId = "discord:1"\n')
    agents, problems = load_agents(tmp_path / "agents")
    assert agents == {"lys": AgentSettings(owner_id="discord:1", invoke=False)}
    (problem,) = problems
    assert "tools.toml" in problem and "'respond'" in problem


def test_a_wrong_type_or_bad_toml_rejects_the_file(tmp_path):
    write(tmp_path, "lys", "tools.toml", 'invoke = "yes"\n')
    write(tmp_path, "ana", "agent.toml", "ownerId = \n")
    write(tmp_path, "eve", "agent.toml", 'ownerId = "slack:1"\n')
    agents, problems = load_agents(tmp_path / "agents")
    assert agents == {"ana": AgentSettings(), "eve": AgentSettings(), "lys": AgentSettings()}
    assert len(problems) == 3 and any("invalid TOML" in p for p in problems)


def test_a_directory_that_is_no_safe_agent_name_is_skipped(tmp_path):
    write(tmp_path, ".hidden", "tools.toml", "invoke = true\n")
    agents, problems = load_agents(tmp_path / "agents")
    assert agents == {} and "not a safe agent name" in problems[0]


def test_the_send_filter_lists_channels_and_refuses_anything_else(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "delivery.toml").write_text('none = ["discord:1", "internal:x"]\n')
    settings, problems = load_agent(config)
    assert (settings.no_delivery, problems) == (frozenset({"discord:1", "internal:x"}), [])
    (config / "delivery.toml").write_text('none = ["nowhere"]\n')
    settings, problems = load_agent(config)
    assert settings.no_delivery == frozenset() and "delivery.toml" in problems[0]
