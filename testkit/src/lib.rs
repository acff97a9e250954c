//! testkit: see DESIGN section in README.
