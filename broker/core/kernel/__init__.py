"""The kernel: routing state, the dispatch table, the engine, the commands it emits, the
records the store applies, and the small utilities every room uses."""
