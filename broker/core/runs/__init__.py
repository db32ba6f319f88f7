"""The data of workflow runs, below every room that uses them: workflow paths (their
grammar and matching) and run trees (runs, their stages, subagents and records)."""
