"""Label Studio's own settings for a desk, less its request-log middleware, with its task
counters counted in SQL (:mod:`rescue_desk_counters`, an app of one module) and with the guards
of :mod:`rescue_desk_guard` (cross-site writes refused, failed logins limited, logout final). Run by Label Studio's
python (its venv), never imported by the pipeline: :class:`pipeline.labelstudio.server.LabelStudioServer`
puts this folder on ``PYTHONPATH`` and names this module ``DJANGO_SETTINGS_MODULE``, and only for
the Label Studio version in :data:`WRITTEN_FOR` (any other runs its settings unchanged).

Why: ``core.middleware.ContextLogMiddleware`` is Label Studio's telemetry hook. Whatever
COLLECT_ANALYTICS says, it parses every request body once more (a push sends each desk about 15 MB
of private transcript, so 11 % of the desk's CPU in a push, measured with py-spy) and writes a
server id under the user's config folder; with analytics off it sends nothing and nothing else
reads what it sets (``request.server_id``). Without it, no request body reaches telemetry code at
all. The counters and the guards: see those modules. Everything else is Label Studio's settings
as they are.
"""
from core.settings.base import *  # noqa: F401,F403 - first, as Label Studio's own settings begin: their
# import reads Django settings half-way (sentry), which then finds this module holding the base ones
from label_studio.core.settings.label_studio import *  # noqa: F401,F403
from django.core.exceptions import ImproperlyConfigured

WRITTEN_FOR = "1.23.2"  # the server reads this line: checked against that version's settings only
REQUEST_LOG = "core.middleware.ContextLogMiddleware"

if REQUEST_LOG not in MIDDLEWARE:  # noqa: F405 - all or nothing: never a silent half-change
    raise ImproperlyConfigured(f"{REQUEST_LOG} is not in Label Studio's MIDDLEWARE: these settings were "
                               f"written for Label Studio {WRITTEN_FOR}")
MIDDLEWARE = [m for m in MIDDLEWARE if m != REQUEST_LOG]  # noqa: F405

# The guards rely on these being as written for: the session in a signed cookie with an id
# (uid) in it, and Django's CSRF check off for the API (what CrossSiteWrites makes up for).
SESSIONS = "django.contrib.sessions.middleware.SessionMiddleware"
RELIED_ON = (SESSIONS, "core.middleware.DisableCSRF", "core.middleware.SetSessionUIDMiddleware")
SIGNED = "django.contrib.sessions.backends.signed_cookies"
if [m for m in RELIED_ON if m not in MIDDLEWARE] or SESSION_ENGINE != SIGNED:  # noqa: F405
    raise ImproperlyConfigured(f"Label Studio's sessions or CSRF middleware are not those rescue_desk_guard was "
                               f"written for (Label Studio {WRITTEN_FOR})")
_at = MIDDLEWARE.index(SESSIONS) + 1  # before authentication: an ended session never logs anyone in
MIDDLEWARE[_at:_at] = ["rescue_desk_guard.CrossSiteWrites", "rescue_desk_guard.EndedSessions"]
MIDDLEWARE.append("rescue_desk_guard.LoginThrottle")  # last: after the CSRF check of the login form
INSTALLED_APPS = [*INSTALLED_APPS, "rescue_desk_counters.CountersConfig"]  # noqa: F405

# Files the desk writes (exports of answers, uploads) are its owner's alone, like everything under
# the data root: Django chmods uploads to 0644 by default, whatever the process's umask.
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
