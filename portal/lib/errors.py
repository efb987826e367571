"""Domain errors every layer may raise and every entry point renders the same way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Model, ProtectedError, RestrictedError
from django.utils.translation import gettext as _


def describe(obj: Model) -> str:
    """A row as people name it: “inference service “churn””."""
    return f"{obj._meta.verbose_name} “{obj}”"


class Conflict(Exception):
    """The action cannot happen in the current state (HTTP 409): something still uses the object. `blocked_by`
    names what, so the caller knows what to delete or change first."""

    def __init__(self, message: str, blocked_by: Iterable[Model | str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.blocked_by = sorted({item if isinstance(item, str) else describe(item) for item in blocked_by})

    def as_dict(self) -> dict[str, Any]:
        return {"detail": self.message, "blocked_by": self.blocked_by}

    @classmethod
    def from_protected(cls, exc: ProtectedError | RestrictedError, obj: Model | None = None) -> Conflict:
        """A database-level refusal to delete, as a message naming the rows that still point at `obj`."""
        blockers = sorted({describe(o) for o in (exc.protected_objects if isinstance(exc, ProtectedError)
                                                 else exc.restricted_objects)})  # fmt: skip
        subject = describe(obj) if obj is not None else _("This object")
        message = _("%(subject)s is still used by: %(blockers)s. Delete or change those first.") % {
            "subject": subject[:1].upper() + subject[1:], "blockers": "; ".join(blockers),
        }  # fmt: skip
        return cls(message, blockers)
