//! web: see DESIGN section in README.
