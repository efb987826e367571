"""Citations are the portal's check of which passages an answer's words come from, never the model's own markers:
a marker the model writes is dropped (even split across streamed pieces), an answer citing a passage it does not
rest on gets the one it does, and an answer resting on none is flagged instead of cited."""

from __future__ import annotations

from apps.knowledge import prompts

README_TEXT = "```sh\nmake test\n```\n\nruns the whole test suite (creating `.venv`)."
README = prompts.Source(1, "README.md", "MLOps portal › Quick start", README_TEXT)
HPO_TEXT = "A study samples hyperparameters with Optuna and prunes bad trials early."
HPO = prompts.Source(2, "docs/hpo.md", "Studies", HPO_TEXT)


def test_the_passage_the_answer_rests_on_is_cited_not_the_one_the_model_names():
    assert prompts.cited("Run `make test` to run the whole test suite [2].", [README, HPO]) == [1]
    assert prompts.cited("A study samples hyperparameters with Optuna [1].", [README, HPO]) == [2]


def test_an_answer_resting_on_no_passage_cites_none():
    assert prompts.cited("Use python -m unittest discover in the project folder [1].", [README, HPO]) == []
    assert prompts.cited(prompts.NOT_FOUND, [README, HPO]) == []
    assert prompts.cited("Yes.", [README]) == []


def test_model_markers_are_dropped_from_the_stream_even_split_across_pieces():
    state = prompts.CitationFilter()
    pieces = ["Run `make", " test`", " [", "1", "]", ". See [2", "] and a[b] list", " [x]"]
    out = list(prompts.filtered(pieces, state))
    assert "".join(out) == "Run `make test`. See and a[b] list [x]"
    assert "".join(state.text) == "".join(out)
    assert "[" not in "".join(out[:2])  # nothing of a marker was passed on before it was known to be one


def test_the_chosen_design_shows_the_passage_right_before_the_question():
    messages = prompts.messages(prompts.CHOSEN, "How do I run the tests?", [README, HPO])
    user = messages[-1]["content"]
    assert messages[-1]["role"] == "user"
    assert user.index("make test") < user.index("Question: How do I run the tests?")
    shown = [s for s in (README, HPO) if s.text[:20] in "".join(m["content"] for m in messages)]
    assert len(shown) == prompts.CHOSEN.passages
