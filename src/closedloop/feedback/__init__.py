"""closedloop.feedback (see ARCHITECTURE.md)."""
