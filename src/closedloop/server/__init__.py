"""closedloop.server (see ARCHITECTURE.md)."""
