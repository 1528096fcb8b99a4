"""One result per (check, host, subject): the data every report is made from.

Outcomes are the ones of the preflight.json contract (DESIGN.md, schema 1):
``passed``, ``failed``, ``warning`` (a failed warning-severity check), ``error``
(could not be evaluated) and ``skipped`` (not applicable).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, fields

OUTCOMES = ("passed", "failed", "warning", "error", "skipped")
SEVERITIES = ("error", "warning")

# Worst first: the matrix shows the worst outcome of a (host, check) cell.
_RANK = {"failed": 0, "error": 1, "warning": 2, "passed": 3, "skipped": 4}


# Control characters (tab and newline aside) in text that came from a node: shown as \xNN, so a
# tool's stderr cannot retitle, clear or recolour the operator's terminal, or hide lines.  Lone
# surrogates too: a byte that was not UTF-8 (decoded with surrogateescape, or read back from saved
# facts) cannot be written to a UTF-8 report at all, and would abort it.
# Bidirectional marks, overrides and isolates count as control characters: one in a node's value
# would turn the checker's own words around it backwards; so do the Unicode line separators.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        code -= 0xDC00  # surrogateescape's stand-in for the byte it could not decode
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    r"""``text`` with control characters and undecodable bytes written out as ``\xNN``."""
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


_SECRET_WORDS = ("PASS", "SECRET", "TOKEN", "CREDENTIAL", "PRIVATE", "APIKEY", "API_KEY", "ACCESS_KEY", "AUTH")


def is_secret_name(name: str) -> bool:
    """A variable name that may hold a secret (HF_TOKEN, AWS_SECRET_ACCESS_KEY, OBS_SK, GITHUB_PAT):
    cautious, for --facts-out, where a value too many redacted costs nothing."""
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS) or upper.endswith(("_PAT", "_SK", "_AK", "_PW", "_PWD"))


# A name whose last word is a secret's (HF_TOKEN, DB_PASSWORD, WANDB_API_KEY, OBS_SK), for text
# shown to the operator: TOKENIZER_PATH, max_num_batched_tokens, PASSTHROUGH stay readable.
# (PGPASSWORD too; MYSQL_PWD but not the shell's PWD.)
_SECRET_TAIL = re.compile(r"(?i)(?:password|passwd|[_-]pwd|(?:^|[_-])(?:token|pass|secret|auth|api[_-]?key|"
                          r"access[_-]?key|secret[_-]?key|private[_-]?key|sk|ak|pat|credentials?))$")
_SPACE = " \t\r\n\f\v"  # whitespace only: Python's \s also takes \x1c-\x1f, which would end a value early
_VALUE = rf"""(?:"[^"]*"|'[^']*'|(?!-)[^{_SPACE}'"&;)]+)"""  # a value, quoted or bare, never the next --flag
# Secrets written inline in a command line or a URL, as launch scripts and job files quote them.
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*):([^@\s/]+)@")  # userinfo has no raw /
_URL_TOKEN_USER = re.compile(r"(?i)\b(https?://)(gh[pousr]_[A-Za-z0-9]+|glpat-[A-Za-z0-9_-]+|hf_[A-Za-z0-9]+)@")
_AUTH_HEADER = re.compile(r"(?i)(authorization:[ \t]*(?:bearer|basic|token)?[ \t]*)[^\s'\"]+")
_BEARER = re.compile(r"(?i)\b(bearer[ \t]+)[A-Za-z0-9._~+/=-]{8,}")
_QUERY_SECRET = re.compile(r"(?i)([?&](?:(?:[a-z]*_)?(?:token|api_?key|access_?key|secret|password|passwd)|key|sig|"
                           r"signature|x-amz-signature|x-amz-credential)=)[^&\s'\"]+")
_FLAG_SECRET = re.compile(r"(?i)(--(?:[a-z0-9]+[-_])*(?:token|password|passwd|secret|api[-_]?key|access[-_]?key)"
                          r"(?:[-_]id)?)([= \t]+)(?!<redacted>)" + _VALUE)
# NAME=value anywhere; "name": value / name: value only as a key (quoted, or opening a line or a
# mapping), not prose ("the script passes a token: set HF_TOKEN instead").
_ASSIGNMENT = re.compile(r"""\b([A-Za-z_][A-Za-z0-9_.]*)([ \t]*=[ \t]*)(?!<redacted>)""" + _VALUE)
_KEY_VALUE = re.compile(r"""((?:^|[{,][ \t]*)(["']?)([A-Za-z_][A-Za-z0-9_.]*)\2[ \t]*:[ \t]*|(["'])([A-Za-z_][A-Za-z0-9_.]*)\4[ \t]*:[ \t]*)(?!<redacted>)"""
                        rf"""(?:"[^"]*"|'[^']*'|[^{_SPACE}'",}}]+)""", re.M)  # a mapping's value ends at , or }
_USER_PASSWORD = re.compile(r"(\bcurl\b[^\n]*?\s(?:-u|--user)[ \t]+[^\s:]+):(\S+)")  # curl -u user:password


def _secret_name(name: str) -> bool:
    return bool(_SECRET_TAIL.search(name.split(".")[-1]))


def redact_secrets(text: str) -> str:
    """``text`` with inline secrets replaced by ``<redacted>``: a URL's password (or a token as its
    user), an Authorization header, a token in a query string, a ``--hf-token X`` flag, a
    ``HF_TOKEN=X`` or ``"password": X`` setting, ``curl -u user:password``."""
    text = _URL_PASSWORD.sub(r"\1:<redacted>@", text)
    text = _URL_TOKEN_USER.sub(r"\1<redacted>@", text)
    text = _AUTH_HEADER.sub(r"\1<redacted>", text)
    text = _BEARER.sub(r"\1<redacted>", text)
    text = _QUERY_SECRET.sub(r"\1<redacted>", text)
    text = _FLAG_SECRET.sub(r"\1\2<redacted>", text)
    text = _USER_PASSWORD.sub(r"\1:<redacted>", text)
    text = _ASSIGNMENT.sub(lambda m: f"{m[1]}{m[2]}<redacted>" if _secret_name(m[1]) else m[0], text)
    return _KEY_VALUE.sub(lambda m: f"{m[1]}<redacted>" if _secret_name(m[3] or m[5]) else m[0], text)


def one_line(text: str) -> str:
    r"""``visible(text)`` with newlines written out as ``\n`` too: a message quoting a node's value
    stays on its own line, so the value cannot print a line of its own in the terminal summary.
    Inline secrets it quotes (a launch script's token) are redacted."""
    return visible(redact_secrets(text)).replace("\n", "\\n")


def shortened(text: str, limit: int = 1000) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def worst(outcomes) -> str | None:
    """The outcome that matters most to an operator among ``outcomes``."""
    ranked = sorted(outcomes, key=_RANK.__getitem__)
    return ranked[0] if ranked else None


@dataclass(frozen=True, slots=True)  # slots: 35 000 of them at 1000 hosts
class Result:
    check: str
    host: str | None  # None for a cluster-wide result
    subject: str | None  # "npu3", a host name, a port ...; None when the subject is the host itself
    outcome: str
    severity: str
    message: str
    remedy: str = ""
    reference: str = ""
    observed: str | None = None
    expected: str | None = None
    outliers: tuple[str, ...] = field(default=())  # cluster-wide results: the hosts at fault
    nodeid: str | None = None  # the pytest item that produced it
    # A passing cluster-wide check: what the nodes it compared agree on, as (key, value) pairs
    # (the TLS switch, each version; device IPs: address -> its NPU).  preflight-merge compares
    # it across shards, whose own runs never saw each other's nodes.
    agreed: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    # Reports read a result as they read its preflight.json form (r["check"], r.get("remedy")),
    # so one renderer serves this run's results and results read from files (preflight merge),
    # without a dict copy of every result (35 000 at 1000 hosts).
    def __getitem__(self, key: str):
        if key not in _FIELD_SET:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default=None):
        return getattr(self, key) if key in _FIELD_SET else default

    def to_json(self) -> dict:
        # Every field is a plain value: a shallow copy (asdict deep-copies, ~90 000 times a fleet run).
        data = {f: getattr(self, f) for f in _FIELDS}
        data["outliers"] = list(self.outliers)
        if self.agreed:
            data["agreed"] = dict(self.agreed)
        else:  # the key only where there is something (35 000 results at 1000 hosts, a few have it)
            del data["agreed"]
        return data


_FIELDS = tuple(f.name for f in fields(Result))
_FIELD_SET = frozenset(_FIELDS)


class ResultStore:
    """Thread-safe, ordered collection of results for one run."""

    def __init__(self):
        self._lock = threading.Lock()
        self._results: list[Result] = []

    def add(self, result: Result) -> None:
        with self._lock:
            self._results.append(result)

    def extend(self, results) -> None:
        with self._lock:
            self._results.extend(results)

    def all(self) -> list[Result]:
        with self._lock:
            return list(self._results)

    def sort(self, key) -> None:
        """Put the results in ``key``'s order (stable: one item's results keep theirs)."""
        with self._lock:
            self._results.sort(key=key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._results)

    def since(self, start: int) -> list[Result]:
        """Results added after the first ``start`` (what one check just recorded)."""
        with self._lock:
            return self._results[start:]

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(OUTCOMES, 0)
        for r in self.all():
            counts[r.outcome] += 1
        return counts
