"""Model fields the apps share."""

from __future__ import annotations

from typing import Any

from encrypted_fields.fields import EncryptedTextField


class EncryptedText(EncryptedTextField):
    """Text encrypted at rest (Fernet; keys from SECRET_KEY and SECRET_KEY_FALLBACKS, salted by SALT_KEY).

    The library stores an empty value as NULL (its column must allow it); it reads back as "" here, so the
    attribute is always a str, as for a TextField.
    """

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        value = super().from_db_value(value, expression, connection)
        return "" if value is None else value
