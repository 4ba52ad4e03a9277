"""closedloop.harness (see ARCHITECTURE.md)."""
