"""Cross-site request forgery refusals for the airflow-tpc UI plugin's state-changing routes.

The UI's cookie is sent by the browser on its own, so a state-changing request must
also be one a cross-site page cannot forge: no foreign ``Origin``/``Referer``/
``Sec-Fetch-Site`` and a JSON body (:func:`csrf_refusal`), and the ``X-Airflow-TPC``
header carrying the session's token (:func:`csrf_token`, an HMAC of the session's JWT)
when it authenticates with the cookie.  An HTML form can send neither; ``fetch`` from
another origin needs a CORS preflight, and cannot read the page that holds the token.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

#: The header every state-changing request must carry: the session's token when the request
#: authenticates with the UI's cookie, any non-empty value with a bearer token.
CSRF_HEADER = "X-Airflow-TPC"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an absolute http(s) URL; None when it has none."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def api_base_url() -> str:
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="") or ""


def csrf_refusal(method: str, headers: Mapping[str, str], request_url: str,
                 base_url: str = "") -> str | None:
    """Why a request could have been forged by a cross-site page (None when it could not).

    Safe methods pass. A state-changing request needs all of:

    * no cross-origin source: ``Sec-Fetch-Site`` (when sent) is ``same-origin`` or
      ``none``; ``Origin`` (or, without it, ``Referer``) when sent names the API server:
      ``[api] base_url`` when it is an absolute URL, else the request's own scheme+host;
    * the ``X-Airflow-TPC`` header (a cross-site form cannot set a header; ``fetch`` from
      another origin needs a CORS preflight for it);
    * a JSON body (``Content-Type: application/json``): form-encoded, multipart and
      text/plain bodies, the only ones an HTML form can send, are refused.

    ``headers`` must be case-insensitive (Starlette's are).
    """
    if method.upper() in SAFE_METHODS:
        return None
    expected = _origin(base_url) or _origin(request_url)
    fetch_site = (headers.get("sec-fetch-site") or "").strip().lower()
    if fetch_site and fetch_site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    for name in ("origin", "referer"):
        value = headers.get(name)
        if value is None:
            continue
        if expected is None or _origin(value) != expected:
            return (f"cross-origin request refused: {name.capitalize()} {value[:200]!r} "
                    f"is not the API server's origin")
        break  # Origin present and right: the Referer (a path within it) adds nothing
    if not (headers.get(CSRF_HEADER) or "").strip():
        return f"state-changing requests need the {CSRF_HEADER} header"
    media_type = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        return ("state-changing requests need a JSON body (Content-Type: application/json), "
                f"not {media_type or 'no content type'}")
    return None


def csrf_token(credential: str) -> str:
    """The page's anti-forgery token, bound to the session: an HMAC of the JWT the browser
    authenticates with, keyed by the API server's secret.  A cross-site page can neither
    read the cookie nor the page, so it cannot compute or learn it; a new login (a new
    JWT) gets a new token."""
    from airflow.configuration import conf

    secret = (conf.get("api", "secret_key", fallback="")
              or conf.get("api_auth", "jwt_secret", fallback="") or "airflow-tpc")
    return hmac.new(secret.encode(), b"airflow-tpc-csrf\0" + credential.encode(),
                    hashlib.sha256).hexdigest()


def session_csrf_refusal(headers: Mapping[str, str], cookies: Mapping[str, str]) -> str | None:
    """A request that authenticates with the UI's cookie (no ``Authorization`` header) must
    carry the session's token in ``X-Airflow-TPC``; an API client sending its own bearer
    token cannot be forged by another site and needs only a non-empty header."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    if (headers.get("authorization") or "").lower().startswith("bearer "):
        return None
    cookie = cookies.get(COOKIE_NAME_JWT_TOKEN)
    if not cookie:
        return None  # unauthenticated: the auth dependency answers 401
    sent = (headers.get(CSRF_HEADER) or "").strip()
    if not hmac.compare_digest(sent.encode(), csrf_token(cookie).encode()):
        return (f"the {CSRF_HEADER} header does not carry this session's token: reload the "
                "page and try again")
    return None
