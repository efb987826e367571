import pytest
from django.core.exceptions import ValidationError

from apps.datasets.paths import clean_path, join_prefix

pytestmark = pytest.mark.smoke


@pytest.mark.parametrize(
    "raw", ["../x", "a/../../x", "/etc/passwd", "C:/x", "a\\b", "a/\x00b", "", "  ", ".", "dir/", "a/.."]
)
def test_it_rejects_traversal_absolute_and_odd_names(raw):
    with pytest.raises(ValidationError):
        clean_path(raw)


@pytest.mark.parametrize(("raw", "clean"), [("a.csv", "a.csv"), ("d/./e.txt", "d/e.txt"), ("d//e", "d/e")])
def test_it_normalises_relative_paths(raw, clean):
    assert clean_path(raw) == clean


def test_archive_members_are_joined_under_the_prefix_and_checked():
    assert join_prefix("images", "cats/1.png") == "images/cats/1.png"
    with pytest.raises(ValidationError, match=r"“\.\.” is not allowed"):
        join_prefix("images", "../../evil")
