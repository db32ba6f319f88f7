"""``python -m client``: the command line; it lives in :mod:`client.cli`."""

from __future__ import annotations

import sys

try:
    from .cli.main import main
    from .cli.tail import format_event, format_output, tail
except KeyboardInterrupt:          # Ctrl-C while starting: as quiet as later (exit 130)
    sys.exit(130)

__all__ = ["format_event", "format_output", "main", "tail"]

if __name__ == "__main__":
    sys.exit(main())
