"""The engine's assembly, above every room: the aggregate state, the dispatch tables
(kinds, actions, lifecycle listeners, hooks), the stats figures, and the engine."""
