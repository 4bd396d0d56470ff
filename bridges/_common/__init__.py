"""What every bridge shares."""

from ._errors import BridgeError

__all__ = ["BridgeError"]
