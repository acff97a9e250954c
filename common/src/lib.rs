//! common: see DESIGN section in README.
