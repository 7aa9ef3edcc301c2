"""The transient family: the faults worth trying again, raised where they are seen.

A :class:`TransientError` is a fault that may pass by itself: a service that did not answer
(connection refused or reset, a timeout: :class:`Unreachable`), a server error (HTTP 5xx:
:class:`ServerFault`), a resource someone else holds for now (:class:`Locked`). The code at the
boundary where such a fault shows raises it as a subclass that also belongs to its own family:

- the Label Studio client (``pipeline.labelstudio.client``): ``LabelStudioUnavailable`` (no
  answer, a timeout) and ``LabelStudioFault`` (HTTP 5xx), each a ``LabelStudioError`` too; the
  same two where a desk's signup form is reached without the client (``Desks._sign_up``);
- the model endpoint of pre-annotation (``pipeline.annotation.prelabel``): ``ModelUnreachable``,
  ``ModelFault``; pre-annotation is optional, so the prelabeler records them and the push goes on;
- the push (``pipeline.annotation.push``): ``PushInterrupted``, a ``PushError`` stopped by one
  of those;
- the flows' own calls to the Prefect server (``flows.prefect_calls``): ``PrefectUnavailable``,
  ``PrefectFault``;
- a lock file held by another run: ``MigrationLocked`` (``pipeline.labelstudio.migrate``).

The SQLite databases behind the servers (Label Studio's, Prefect's) report a lock that outlasts
their wait as HTTP 500, which arrives here as a server fault (``LabelStudioFault``). The one
live SQLite database the library reads itself (the old shared Label Studio's, copied by the
migration) is copied with SQLite's backup, which waits out a lock instead of failing.

The flows retry this family and only this (``flows.NETWORK_RETRIES``: ``isinstance(exc,
TransientError)``, never a type name or a message). Every other error - a configuration error,
bad input, an HTTP 4xx answer, a corrupt file - fails at once with its message: it would only
fail the same way again.

Not raised at all: the health probes (``LabelStudioServer.healthy``), whose answer to a server
that does not answer is "not healthy".

Not transient, on purpose: an ffprobe/ffmpeg timeout (``pipeline.media.audio``). A file that
hangs ffprobe hangs it again, so the stage quarantines it with its reason and the batch goes on;
trying again would cost the whole timeout three more times.

This module is the bottom of the core: it imports nothing from the project.
"""
from __future__ import annotations


class TransientError(Exception):
    """A fault that may pass by itself; trying again later is worth it."""


class Unreachable(TransientError):
    """A service did not answer: connection refused or reset, a timeout, a name not resolved."""


class ServerFault(TransientError):
    """A service answered with a server error (HTTP 5xx)."""


class Locked(TransientError):
    """A resource is held by someone else for now (a locked database, a lock file)."""
