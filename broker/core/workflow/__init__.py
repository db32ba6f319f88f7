"""Workflows: stage paths, run trees, stage binding, host operations, sticky entries kept
for stages not started yet, closed stages and held subagent sends."""
