"""MongoDB: batch documents per session and a counter document, in the SDK's collections."""

from .session import *  # noqa: F403
from .session import __all__ as __all__
