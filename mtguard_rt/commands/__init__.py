"""CLI subcommands: each module here defines `register(subparsers)`; `cli.py` finds them all."""
