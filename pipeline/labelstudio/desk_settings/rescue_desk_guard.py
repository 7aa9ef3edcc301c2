"""What a desk adds to Label Studio's own guards (middleware :mod:`rescue_desk_settings` puts in
place). Run by Label Studio's python, never imported by the pipeline.

* :class:`CrossSiteWrites`: a write (POST, PUT, PATCH, DELETE) that carries the desk's session
  cookie is refused (HTTP 403) when its ``Origin`` (or, without one, its ``Referer``) is not the
  desk's own address or one of ``CSRF_TRUSTED_ORIGINS`` (the TLS proxy's public address). Why:
  Label Studio turns Django's CSRF check off for every view but login and signup
  (``core.middleware.DisableCSRF``) and its app sends no CSRF token, so any page of the same
  site (every desk of a TLS recipe, every port of 127.0.0.1) could write with the annotator's
  cookie. Browsers send ``Origin`` with every cross-origin write; the desk's own pages and the
  front send the desk's own. Requests without a session cookie (the pipeline's token) pass.
* :class:`LoginThrottle`: at most :data:`FAILURES` failed logins per :data:`WINDOW_S` per account
  and per client address; the next attempt, right password or not, gets HTTP 429 until the
  oldest failure is older than the window. Counted in the desk's process (one process per
  desk): a restart clears it. Behind a proxy every login comes from the proxy's address, so
  there the address limit is one for the whole desk.
* :class:`EndedSessions`: logging out ends that session for good. Label Studio keeps sessions
  in signed cookies (``signed_cookies``), which a logout cannot take back: a copy of the cookie
  kept working. At logout the session's id (``uid``, which ``SetSessionUIDMiddleware`` puts in
  every session) is recorded in Django's session table, unused by that engine; a session
  carrying a recorded id is flushed before authentication. A password reset needs nothing
  here: Django ends every session of a user whose password changed (the session's auth hash).
"""
import hashlib
import threading
import time
from collections import deque
from datetime import timedelta

FAILURES = 10  # failed logins per account and per address ...
WINDOW_S = 15 * 60  # ... within this many seconds
_UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


def _check_routes(*names: str) -> None:
    """All or nothing: the routes these guards watch must be Label Studio's as written for."""
    from django.core.exceptions import ImproperlyConfigured
    from django.urls import NoReverseMatch, reverse

    for name in names:
        try:
            reverse(name)
        except NoReverseMatch:
            raise ImproperlyConfigured(f"Label Studio has no route named {name!r}: rescue_desk_guard was written "
                                       "for another version (run RESCUE_LS_STOCK_SETTINGS=1 or check it)") from None


class CrossSiteWrites:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from django.conf import settings
        from django.http import JsonResponse

        if request.method in _UNSAFE and settings.SESSION_COOKIE_NAME in request.COOKIES:
            origin = request.META.get("HTTP_ORIGIN")
            if origin is None and request.META.get("HTTP_REFERER"):
                parts = request.META["HTTP_REFERER"].split("/")
                origin = "/".join(parts[:3]) if len(parts) >= 3 else "null"
            if origin is not None:
                own = f"{request.scheme}://{request.get_host()}"
                trusted = {own, *(o.rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS)}
                if origin.rstrip("/") not in trusted:
                    return JsonResponse({"detail": f"cross-site write refused: a request from {origin[:200]} "
                                                   f"carries this desk's session cookie; the desk takes writes "
                                                   f"with its cookie only from its own pages ({own})"}, status=403)
        return self.get_response(request)


class _Window:
    """Failure times per key within the window (thread-safe: runserver serves each request in a thread)."""

    def __init__(self, limit: int = FAILURES, window_s: float = WINDOW_S, clock=time.monotonic):
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._times: dict[tuple, deque] = {}
        self._lock = threading.Lock()

    def _live(self, key, now):
        times = self._times.get(key)
        while times and now - times[0] >= self.window_s:
            times.popleft()
        if times is not None and not times:
            del self._times[key]
            return None
        return times

    def wait_s(self, keys) -> float:
        """Seconds until every key is under its limit again (0: not blocked)."""
        now = self.clock()
        with self._lock:
            waits = [self.window_s - (now - t[0]) for k in keys if (t := self._live(k, now)) and len(t) >= self.limit]
        return max(waits, default=0.0)

    def fail(self, keys) -> None:
        now = self.clock()
        with self._lock:
            for key in keys:  # keys grow by at most `limit` per address per window: blocked ones record nothing
                self._live(key, now)
                self._times.setdefault(key, deque()).append(now)


FAILED = _Window()


class LoginThrottle:
    def __init__(self, get_response):
        self.get_response = get_response
        _check_routes("user-login")

    def __call__(self, request):
        response = self.get_response(request)
        keys = getattr(request, "_rescue_login_keys", None)
        if keys and not request.user.is_authenticated:  # the form came back: a failed login
            FAILED.fail(keys)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        from django.http import HttpResponse

        match = request.resolver_match
        if request.method != "POST" or match is None or match.url_name != "user-login":
            return None
        if request.user.is_authenticated:
            return None  # Label Studio sends a logged-in person on; nothing is checked
        keys = (("account", str(request.POST.get("email", "")).strip().lower()),
                ("address", request.META.get("REMOTE_ADDR", "")))
        wait = FAILED.wait_s(keys)
        if wait > 0:
            minutes = max(1, int(wait // 60 + 1))
            body = (f"<!doctype html><title>Too many failed logins</title><p>Too many failed logins for this "
                    f"account or from this address (at most {FAILURES} in {WINDOW_S // 60} minutes). Try again "
                    f"in {minutes} minute{'s' if minutes != 1 else ''}.</p>")
            response = HttpResponse(body, status=429, content_type="text/html; charset=utf-8")
            response["Retry-After"] = str(int(wait) + 1)
            return response
        request._rescue_login_keys = keys
        return None


def _ended_key(uid: str) -> str:
    # Django's session keys are 32 [a-z0-9]: the ":" keeps these apart (the column holds 40)
    return "ended:" + hashlib.sha256(uid.encode()).hexdigest()[:32]


class EndedSessions:
    def __init__(self, get_response):
        self.get_response = get_response
        _check_routes("logout")

    def __call__(self, request):
        from django.contrib.auth import SESSION_KEY
        from django.contrib.sessions.models import Session
        from django.utils import timezone

        session = getattr(request, "session", None)
        if session is not None and session.get(SESSION_KEY) is not None:
            uid = session.get("uid")
            if not uid or Session.objects.filter(session_key=_ended_key(str(uid)),
                                                 expire_date__gt=timezone.now()).exists():
                session.flush()  # logged out (or never given an id): anonymous from here on
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        match = request.resolver_match
        if match is None or match.url_name != "logout":
            return None
        uid = request.session.get("uid")
        if uid and request.user.is_authenticated:
            from django.conf import settings
            from django.contrib.sessions.models import Session
            from django.utils import timezone

            keep = max(settings.SESSION_COOKIE_AGE, getattr(settings, "MAX_SESSION_AGE", 0))
            Session.objects.update_or_create(session_key=_ended_key(str(uid)), defaults={
                "session_data": "", "expire_date": timezone.now() + timedelta(seconds=keep)})
        return None
