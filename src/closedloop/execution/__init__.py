"""closedloop.execution (see ARCHITECTURE.md)."""
