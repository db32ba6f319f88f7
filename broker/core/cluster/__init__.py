"""The cluster: other brokers on the same database, links to them, mirrors of the sessions
they hold, run ownership and forwarding of requests to their owners."""
