"""closedloop.models (see ARCHITECTURE.md)."""
