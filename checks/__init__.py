"""The built-in check catalog, one module per area.

Each test is a check (``@check`` gives it its id, severity, remedy and FAQ source);
each reads facts gathered before the run and records one result per subject in
``verdict``.  ``pytest --inventory hosts.yaml`` collects this package.
"""
