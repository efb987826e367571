"""Bootstrap styling for Django forms, applied once instead of in every template."""

from __future__ import annotations

from typing import Any

from django import forms


def style_form(form: forms.BaseForm) -> None:
    for name, field in form.fields.items():
        widget = field.widget
        css = "form-select" if isinstance(widget, forms.Select) else "form-control"
        if isinstance(widget, forms.CheckboxInput):
            css = "form-check-input"
        if form.is_bound and form._errors and name in form._errors:
            css += " is-invalid"
        widget.attrs["class"] = css


class StyledFormMixin:
    """Mix into a Form: widgets get Bootstrap classes, and invalid fields are marked."""

    def full_clean(self) -> None:
        super().full_clean()  # type: ignore[misc]
        style_form(self)  # type: ignore[arg-type]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        style_form(self)  # type: ignore[arg-type]
