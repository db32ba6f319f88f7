"""Where a request goes and the send path: the resolver (a target, once, for session
ids, names, groups and workflow paths alike) and the send, ask and reply handlers
that use it, across messaging and workflow."""
