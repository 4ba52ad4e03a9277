"""closedloop.decision (see ARCHITECTURE.md)."""
