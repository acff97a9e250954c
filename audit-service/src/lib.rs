//! audit-service: see DESIGN section in README.
