"""The NPUs' RoCE ports as hccn_tool sees them: what HCCL needs between nodes."""

from collections import Counter

from preflight import faq
from preflight.check import check
from preflight.facts import FactUnavailable
from preflight.hostlist import fold

TLS_REMEDY = ("Make the TLS switch the same on every NPU of every node, preferably off: on each NPU whose "
              "switch differs, an operator runs hccn_tool -i <N> -tls -s enable 0 (or 1 everywhere if the "
              "cluster uses TLS), then re-run the preflight.")


def _no_devices(host, verdict):
    verdict.error(message=f"{host.name}: no /dev/davinciN device nodes, so there is no NPU to ask hccn_tool about")


@check("hccl.link_up", title="Every NPU's RoCE link is UP", reference=faq.R_HCCL_LINK, needs=("hccn.link",),
       remedy=("Check the NPU's cable, optical module and switch port (hccn_tool -i <N> -optical -g, "
               "hccn_tool -i <N> -link_stat -g); reseat or replace it, or have the operator reset the chip "
               "(npu-smi set -t reset -i <N> -c 0) if the port stays down."))
def test_link_up(host, facts, verdict):
    links = facts.per_device("hccn.link")
    if not links:
        return _no_devices(host, verdict)
    for dev, state in links.items():
        subject = f"npu{dev}"
        if isinstance(state, FactUnavailable):
            verdict.error(subject, message=f"{host.name} {subject}: {state}")
        elif state == "UP":
            verdict.passed(subject, message=f"hccn_tool -i {dev} -link -g: link status UP")
        else:
            verdict.failed(subject, observed=f"hccn_tool -i {dev} -link -g reports link status: {state}",
                           expected="link status: UP")


def tls_states(facts) -> tuple[dict[int, bool], dict[int, FactUnavailable]]:
    known, unknown = {}, {}
    for dev, tls in facts.per_device("hccn.tls").items():
        if isinstance(tls, FactUnavailable):
            unknown[dev] = tls
        else:
            known[dev] = tls.enabled
    return known, unknown


def on_off(enabled: bool) -> str:
    return "tls switch[1] (on)" if enabled else "tls switch[0] (off)"


@check("hccl.tls_node", title="TLS switch identical on every NPU of a node", reference=faq.R_HCCL_TLS,
       needs=("hccn.tls",), remedy=TLS_REMEDY)
def test_tls_node(host, facts, verdict):
    known, unknown = tls_states(facts)
    if not known and not unknown:
        return _no_devices(host, verdict)
    for dev, why in unknown.items():
        verdict.error(f"npu{dev}", message=f"{host.name} npu{dev}: {why}")
    if not known:
        return
    counts = Counter(known.values())
    if len(counts) == 1:
        verdict.passed(message=f"{on_off(next(iter(counts)))} on all {len(known)} NPUs")
        return
    # The minority is the outlier; on a tie, the NPUs with TLS on (the advice is all off).
    majority = max(counts, key=lambda v: (counts[v], not v))
    odd = sorted(d for d, v in known.items() if v != majority)
    same = sorted(d for d, v in known.items() if v == majority)
    verdict.failed(fold(f"npu{d}" for d in odd),
                   observed=f"{fold(f'npu{d}' for d in odd)} {on_off(not majority)} while "
                            f"{fold(f'npu{d}' for d in same)} {on_off(majority)}",
                   expected="the same TLS switch on every NPU of the node")


@check("cluster.tls_agree", title="TLS switch identical across all NPUs of all nodes", scope="cluster",
       reference=faq.R_HCCL_TLS, needs=("hccn.tls",), remedy=TLS_REMEDY)
def test_tls_agree(cluster, verdict):
    per_host: dict[str, dict[int, bool]] = {}
    unreadable = []
    for host, facts in cluster.reachable():
        known, unknown = tls_states(facts)
        if unknown:
            unreadable.append(host.name)
        if known:
            per_host[host.name] = known
    if not per_host:
        verdict.error(message="no node's TLS switch could be read"
                              + (f" (unreadable on {fold(unreadable)})" if unreadable else ""))
        return
    counts = Counter(v for states in per_host.values() for v in states.values())
    note = f"; not evaluated on {fold(unreadable)}" if unreadable else ""
    down = [h.name for h in cluster.unreachable()]
    note += f"; {fold(down)} unreachable" if down else ""
    if len(counts) == 1:
        verdict.passed(message=f"{on_off(next(iter(counts)))} on all {sum(counts.values())} NPUs of "
                               f"{len(per_host)} nodes{note}")
        return
    majority = max(counts, key=lambda v: (counts[v], not v))
    odd = {h: sorted(d for d, v in s.items() if v != majority) for h, s in per_host.items()}
    odd = {h: ds for h, ds in odd.items() if ds}
    described = "; ".join(f"{h} {fold(f'npu{d}' for d in ds)}" for h, ds in odd.items())
    agreeing = [h for h in per_host if h not in odd]
    verdict.failed(fold(odd), outliers=tuple(odd),
                   observed=f"{on_off(not majority)} on {described}, while the rest "
                            f"({fold(agreeing) or 'none'}) has {on_off(majority)}{note}",
                   expected="one TLS setting on every NPU of every node")
