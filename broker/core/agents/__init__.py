"""Agents: the conversations of each agent, respond (outputs to channels), and invoke
jobs queued for an agent's other conversations."""
