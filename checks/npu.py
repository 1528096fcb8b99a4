"""The NPUs as npu-smi sees them."""

from preflight import faq
from preflight.check import check


def chip_subject(info, chip) -> str:
    multi = sum(1 for c in info.chips if c.npu_id == chip.npu_id) > 1
    return f"npu{chip.npu_id}" + (f".chip{chip.chip_id}" if multi else "")


@check("npu.health", title="Every chip reports Health OK in npu-smi info", reference=faq.V_Q1,
       needs=("npu_smi.info",),
       remedy=("Read the chip's error codes with npu-smi info -t health -i <NPU> -c <chip>, and the device log "
               "(/var/log/npu/); a Warning may clear by itself, Alarm or Critical needs the chip reset or "
               "replaced (npu-smi set -t reset -i <NPU> -c <chip>, by the operator) before a job uses it."))
def test_health(host, facts, verdict):
    info = facts.get("npu_smi.info")
    for chip in info.chips:
        subject = chip_subject(info, chip)
        observed = f"npu-smi info reports Health {chip.health} for NPU {chip.npu_id} chip {chip.chip_id}"
        if chip.health == "OK":
            verdict.passed(subject, message=observed)
        else:
            severity = "warning" if chip.health == "Warning" else "error"
            verdict.failed(subject, observed=observed, expected="Health OK", severity=severity)
