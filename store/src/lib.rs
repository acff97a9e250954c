//! store: see DESIGN section in README.
