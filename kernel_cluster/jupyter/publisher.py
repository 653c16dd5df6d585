"""What one live view is sent, and when: ``Publisher``, now in ``hub.py`` with the
kernel's one update hub that ticks every publisher (this name stays for the
imports that use it)."""

from .hub import FEEDS, MAKERS, MIN_INTERVAL, Publisher, message_size, pack

__all__ = ["FEEDS", "MAKERS", "MIN_INTERVAL", "Publisher", "message_size", "pack"]
