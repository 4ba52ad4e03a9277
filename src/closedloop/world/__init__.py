"""closedloop.world (see ARCHITECTURE.md)."""
