"""closedloop.perception (see ARCHITECTURE.md)."""
