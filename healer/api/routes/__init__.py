"""HTTP routes of each capability, mounted by ``healer.api.app`` (surface → capability)."""
