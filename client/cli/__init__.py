"""``python -m client``: the command line (see :mod:`client.cli.main`)."""
