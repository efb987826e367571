"""Label Studio label configurations (XML) built from the form's kind and labels.

The data keys are fixed: `$image` for image kinds, `$text` for text kinds; the tag names (`image`, `text`,
`label`) are what predictions, exports and the ML-backend views refer to. `kind=xml` takes an expert's own XML,
which Label Studio validates (`services.validate_label_config`) like the built ones.
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

IMAGE_KINDS = {"image_classification", "object_detection"}
TEXT_KINDS = {"text_classification", "ner"}
MAX_LABELS = 200


def clean_labels(labels: list[str]) -> list[str]:
    """Labels stripped, empty ones dropped; duplicates and over-long names refused."""
    cleaned = [str(label).strip() for label in labels if str(label).strip()]
    if len(set(cleaned)) != len(cleaned):
        raise ValidationError({"labels": [_("Each label may appear only once.")]})
    if len(cleaned) > MAX_LABELS:
        raise ValidationError({"labels": [_("At most %(n)d labels.") % {"n": MAX_LABELS}]})
    if any(len(label) > 100 for label in cleaned):
        raise ValidationError({"labels": [_("A label has at most 100 characters.")]})
    return cleaned


def build(kind: str, labels: list[str]) -> str:
    """The XML for a built-in kind; ValidationError keyed by `labels` when there are none."""
    if not labels:
        raise ValidationError({"labels": [_("Give at least one label.")]})
    if kind == "image_classification":
        return _view('<Image name="image" value="$image"/>', _choices("image", labels))
    if kind == "object_detection":
        return _view(
            '<Image name="image" value="$image" zoom="true"/>',
            '<RectangleLabels name="label" toName="image">' + _items("Label", labels) + "</RectangleLabels>",
        )
    if kind == "text_classification":
        return _view('<Text name="text" value="$text"/>', _choices("text", labels))
    if kind == "ner":
        return _view(
            '<Labels name="label" toName="text">' + _items("Label", labels) + "</Labels>",
            '<Text name="text" value="$text"/>',
        )
    raise ValidationError({"kind": [_("Unknown kind %(kind)s.") % {"kind": kind}]})


def data_key(kind: str, label_config: str) -> str:
    """The task data key the media go under: `image` or `text` (for raw XML: the first `$name` it refers to)."""
    if kind in IMAGE_KINDS:
        return "image"
    if kind in TEXT_KINDS:
        return "text"
    import re

    match = re.search(r'value="\$([A-Za-z_][A-Za-z0-9_]*)"', label_config)
    if not match:
        raise ValidationError({"label_config": [_('The configuration names no data field (value="$…").')]})
    return match.group(1)


def _view(*parts: str) -> str:
    return "<View>" + "".join(parts) + "</View>"


def _choices(to_name: str, labels: list[str]) -> str:
    return (
        f'<Choices name="label" toName="{to_name}" choice="single" showInline="true">'
        + _items("Choice", labels)
        + "</Choices>"
    )


def _items(tag: str, labels: list[str]) -> str:
    return "".join(f"<{tag} value={quoteattr(label)}/>" for label in labels)
