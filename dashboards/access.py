"""Who may use the dashboard: the access token and whether the SQL page is on.

`servelens dashboard` passes both in the environment (never on Streamlit's command line,
where `ps` would show the token): SERVELENS_DASHBOARD_TOKEN, when set, must be typed once per
browser session before any page draws; SERVELENS_DASHBOARD_SQL=off removes the SQL page.
Nothing is read from the store before the token is accepted; then the visitor lands on the
Overview (the page a URL asked for is not remembered through the prompt).
"""

from __future__ import annotations

import hashlib
import hmac
import os

import streamlit as st

TOKEN_ENV = "SERVELENS_DASHBOARD_TOKEN"
SQL_ENV = "SERVELENS_DASHBOARD_SQL"
_STATE_KEY = "_servelens_access"


def sql_enabled() -> bool:
    return os.environ.get(SQL_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def granted() -> bool:
    """True when no token is required or this session gave it; otherwise draws the prompt and
    returns False (the caller stops the script)."""
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        return True
    if hmac.compare_digest(st.session_state.get(_STATE_KEY, ""), _digest(token)):
        return True
    st.title("servelens")
    with st.form("servelens_access"):
        given = st.text_input("Access token", type="password", key="servelens_access_token")
        submitted = st.form_submit_button("Open", type="primary")
    if submitted:
        if hmac.compare_digest(_digest(given), _digest(token)):
            st.session_state[_STATE_KEY] = _digest(token)
            st.rerun()
        st.error("wrong access token")
    return False


def guard_cache_clearing() -> None:
    """Streamlit lets any browser session clear the caches every visitor shares (its menu's
    "Clear caches", a websocket message): every visitor then waits for a rebuild. With a
    token set, only a session that gave the token may; the others' requests are ignored.
    (Without a token the dashboard is open to whoever reaches it, this included.)"""
    from streamlit.runtime.app_session import AppSession

    original = AppSession._handle_clear_cache_request
    if getattr(original, "_servelens_guarded", False):
        return

    def guarded(self) -> None:  # type: ignore[no-untyped-def]
        if may_clear_caches(self._session_state):
            original(self)

    guarded._servelens_guarded = True  # type: ignore[attr-defined]
    AppSession._handle_clear_cache_request = guarded  # type: ignore[method-assign]


def may_clear_caches(session_state) -> bool:  # type: ignore[no-untyped-def]
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        return True
    given = session_state[_STATE_KEY] if _STATE_KEY in session_state else ""
    return hmac.compare_digest(str(given), _digest(token))


def guard_git_info() -> None:
    """Streamlit answers any browser session's "load_git_info" message with the repository the
    app's script lies in: its remote, branch, and the names of its uncommitted and untracked
    files (an install from a checkout is in one). No page of servelens uses it: never
    answered, token or not."""
    from streamlit.runtime.app_session import AppSession

    def nothing(self) -> None:  # type: ignore[no-untyped-def]
        return None

    AppSession._handle_git_information_request = nothing  # type: ignore[method-assign]
