//! audit-lib: see DESIGN section in README.
