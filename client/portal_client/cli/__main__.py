"""`python -m portal_client.cli`: the same as the `portal` command."""

from portal_client.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
