"""Who may read the dashboard: the admin key, as a header or as a session cookie.

A browser cannot put the admin key in an ``Authorization`` header when it navigates, and a key
in the URL ends up in history, proxies' logs and Referer headers. So the page itself is a static
shell with no data in it; its data endpoint takes the admin key as a bearer header (curl,
scripts) or a session cookie that the page obtains once by POSTing the key.

The cookie holds no key: ``<expiry>.<HMAC-SHA256(sha256(admin key), expiry)>``. Any replica
with the same admin key verifies it without shared state; changing the admin key ends every
session. It is ``HttpOnly`` (scripts cannot read it), ``SameSite=Strict`` (no cross-site
request carries it), scoped to ``/routefit/ui``, and ``Secure`` when served over https.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

from proxy.errors import ProxyError
from proxy.teams import TeamDirectory, presented_key

__all__ = ["COOKIE", "SESSION_SECONDS", "Sessions"]

COOKIE = "routefit_ui"
SESSION_SECONDS = 12 * 3600


class Sessions:
    def __init__(self, teams: TeamDirectory, admin_hash: bytes | None) -> None:
        self.teams = teams
        self.admin_hash = admin_hash

    @property
    def open(self) -> bool:
        """No admin key and no teams: routefit runs open (local use) and so does the page."""
        return self.teams.open and self.admin_hash is None

    def token(self, now: float | None = None) -> str:
        assert self.admin_hash is not None
        expiry = str(int((now or time.time()) + SESSION_SECONDS))
        return f"{expiry}.{self._mac(expiry)}"

    def valid(self, token: str, now: float | None = None) -> bool:
        if self.admin_hash is None:
            return False
        expiry, _, mac = token.partition(".")
        if not expiry.isdigit() or not hmac.compare_digest(mac, self._mac(expiry)):
            return False
        return int(expiry) > (now or time.time())

    def _mac(self, expiry: str) -> str:
        assert self.admin_hash is not None
        msg = b"routefit-ui-session:" + expiry.encode()
        return hmac.new(self.admin_hash, msg, hashlib.sha256).hexdigest()

    def authorize(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> None:
        """Raise 401/403 unless the request carries the admin key or a valid session."""
        if self.open:
            return
        key = presented_key(headers)
        if key and self.teams.is_admin(key):
            return
        token = cookies.get(COOKIE)
        if token and self.valid(token):
            return
        if self.admin_hash is None:
            raise ProxyError(
                403,
                "the dashboard needs routefit_settings.admin_key to be configured",
                code="admin_key_required",
            )
        raise ProxyError(
            401 if not key else 403, "the dashboard needs the admin key", code="admin_key_required"
        )

    def login(self, key: str) -> str:
        """A session token for the admin key; raises 403 for any other key."""
        if self.admin_hash is None or not self.teams.is_admin(key):
            raise ProxyError(403, "not the admin key", code="admin_key_required")
        return self.token()
