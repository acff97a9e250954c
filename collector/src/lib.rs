//! collector: see DESIGN section in README.
