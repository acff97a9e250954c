//! The plugin's life in a process, with the C client: several clients, the plugin
//! loaded from two files, a forked child, no thread left behind, and configuration
//! errors that fail the client's creation.
