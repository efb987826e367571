"""Forms: Bootstrap styling applied once instead of in every template, and a service's errors put on a form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.core.exceptions import ValidationError


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


class StyledForm(StyledFormMixin, forms.Form):
    """A plain styled form: the `Meta.form` of a FilterSet whose form a page renders."""


def add_service_errors(form: forms.BaseForm, exc: ValidationError) -> None:
    """Put a service's `ValidationError` on the form: an error keyed by one of the form's fields on that field, any
    other (or one without a key) on the whole form. Every page that calls a service shows its errors this way."""
    if hasattr(exc, "error_dict"):
        for field, errors in exc.error_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, exc)


def run_service(form: forms.BaseForm, service: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a service; its field errors land on the form (None when it failed)."""
    try:
        return service(*args, **kwargs)
    except ValidationError as exc:
        add_service_errors(form, exc)
        return None
