"""closedloop.agent (see ARCHITECTURE.md)."""
