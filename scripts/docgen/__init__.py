"""The generators of PROTOCOL.md's and docs/'s generated sections (see ``sections``)."""
