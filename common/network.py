"""Whether a server answers, decided in about two seconds: what a run asks before it would otherwise wait on
a network that is not there (the W&B logger going offline by itself, a Hugging Face dataset read from its
cache instead of five retries). The standard library only."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

CONNECT_TIMEOUT_S = 2.0


def answers(url: str, timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether the server at `url` answers an HTTP(S) request within `timeout` s (any HTTP status counts:
    a TCP connect alone proves nothing behind a proxy or sandbox that accepts every connection).
    Name resolution has no timeout of its own, so the check runs in a daemon thread that is
    abandoned when it takes too long."""
    ok = []

    def probe() -> None:
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
            ok.append(True)
        except urllib.error.HTTPError:
            ok.append(True)  # the server answered
        except Exception:  # URLError, timeouts, TLS errors, ...
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(ok)
