"""ascend-preflight: preflight checks for Ascend NPU clusters."""

__version__ = "0.1.0"
