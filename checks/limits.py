"""Resource limits of the session a job gets."""

from preflight import faq
from preflight.check import check

DEFAULT_MIN_NOFILE = 65536


def _shown(value) -> str:
    return "unlimited" if value is None else str(value)


@check("limits.nofile", title="Open-file limit (ulimit -n) at least 65536", reference=faq.R_ULIMIT,
       needs=("session.nofile",),
       remedy=("Raise the limit for the job's session: docker run --ulimit nofile=65536:65536, or "
               "'* soft nofile 65536' and '* hard nofile 65536' in /etc/security/limits.conf (new sessions), "
               "or LimitNOFILE=65536 for a systemd-started service; for Ray, RAY_ULIMIT_NOFILE=65536."))
def test_nofile(host, facts, verdict):
    limit = facts.get("session.nofile")
    minimum = int(host.vars.get("min_nofile") or DEFAULT_MIN_NOFILE)
    low = [(kind, value) for kind, value in (("soft", limit.soft), ("hard", limit.hard))
           if value is not None and value < minimum]
    observed = f"ulimit -n soft {_shown(limit.soft)}, hard {_shown(limit.hard)}"
    if low:
        verdict.failed(observed=observed, expected=f"both at least {minimum}")
    else:
        verdict.passed(message=observed)
