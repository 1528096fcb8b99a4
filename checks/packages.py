"""Python modules the job needs, in the interpreter the job uses."""

from preflight import faq
from preflight.check import check


@check("packages.required", title="The Python modules the job lists are importable", reference=faq.M20,
       needs=("python.stack",),
       remedy=("Install the missing modules in the job's Python (pip install <package>, per the model's README), "
               "or point `python` in the inventory at the environment that has them."))
def test_required(host, facts, verdict):
    wanted = list(host.vars.get("python_modules") or ())
    if not wanted:
        verdict.skipped(message="no python_modules listed in the inventory")
        return
    stack = facts.get("python.stack")
    for module in wanted:
        origin = stack.modules.get(module)
        if module not in stack.modules:
            verdict.error(module, message=f"{host.name}: {module} was not asked about (re-run the probe)")
        elif origin:
            verdict.passed(module, message=f"{module} found at {origin}")
        else:
            verdict.failed(module, observed=f"No module named '{module}' in {stack.executable or 'python3'}",
                           expected=f"{module} importable")
