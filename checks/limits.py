"""Resource limits of the session a job gets."""

from preflight import faq
from preflight.check import check

DEFAULT_MIN_NOFILE = 65536


def _shown(value) -> str:
    return "unlimited" if value is None else str(value)


RAISE_HARD = ("Raise the hard limit for the job's sessions: in a container, docker run --ulimit "
              "nofile={n}:{n}; on a host, '* soft nofile {n}' and '* hard nofile {n}' in "
              "/etc/security/limits.conf, plus 'root soft nofile {n}' and 'root hard nofile {n}' (the * lines do "
              "not apply to root), then log in again; LimitNOFILE={n} for a systemd-started service. A process "
              "cannot raise its soft limit above the hard one.")
RAISE_SOFT = ("The hard limit allows it: run `ulimit -n {n}` in the launch script before the job starts (or set "
              "the soft limit as for the hard one: limits.conf, docker run --ulimit nofile={n}:{n}); ROLL's FAQ also "
              "sets system_envs: RAY_ULIMIT_NOFILE: \"{n}\" in the pipeline YAML.")


@check("limits.nofile", title="Open-file limit (ulimit -n) at least 65536", reference=faq.R_ULIMIT,
       needs=("session.nofile",), remedy=RAISE_HARD.format(n=DEFAULT_MIN_NOFILE))
def test_nofile(host, facts, verdict):
    limit = facts.get("session.nofile")
    minimum = int(host.vars.get("min_nofile") or DEFAULT_MIN_NOFILE)
    low = [(kind, value) for kind, value in (("soft", limit.soft), ("hard", limit.hard))
           if value is not None and value < minimum]
    observed = f"ulimit -n soft {_shown(limit.soft)}, hard {_shown(limit.hard)}"
    if low:
        hard_low = any(kind == "hard" for kind, _ in low)
        verdict.failed(observed=observed, expected=f"both at least {minimum}",
                       remedy=(RAISE_HARD if hard_low else RAISE_SOFT).format(n=minimum))
    else:
        verdict.passed(message=observed)
