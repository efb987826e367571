"""What a clear error of the `portal` command looks like: its exit code, one `Error…` line naming the problem on
stderr, no traceback. `fails(...)` is also how tests/client/test_command_coverage.py recognises an error case."""

from __future__ import annotations

from click.testing import Result


def fails(result: Result, code: int, *texts: str) -> Result:
    """Assert that `portal …` exited with `code`, said each of `texts` on stderr and printed no traceback."""
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output, result.output
    assert result.stderr.strip(), "an error says what went wrong"
    for text in texts:
        assert text in result.stderr, (text, result.stderr)
    return result
