//! The deploy kit (deploy/) checked against the code, so that it cannot drift from it:
//! - every example config (deploy/config, the compose configs, the configs in the
//!   Kubernetes ConfigMaps, with the environment each deployment sets) loads through the
//!   loader of its subcommand, and `deny_unknown_fields` catches a typo in any section;
//! - each deployment fits together (auditors' tiers in the topology, one window size,
//!   every audit topic collected, the many-to-one datacenter mapping);
//! - compose, Kubernetes and systemd files parse, name files that exist, run
//!   subcommands with flags the binary has, and probe the ports and paths the services
//!   serve; the image's entrypoint, user and ports fit them;
//! - every metric and label value in the Prometheus rules, their promtool tests and the
//!   Grafana panels is one the services expose; alert job names are scrape job names;
//! - every SQL query of the Grafana dashboard runs against a PostgreSQL database
//!   migrated with our migrations and seeded through the store's write API, returns
//!   what the seeded pipeline implies, and agrees with web's detection engine
//!   (completeness, anomalies) and percentiles;
//! - the compose stack without Docker: `kafka-audit migrate`, `audit`, `collect` and
//!   `serve` run as processes with the compose configs (addresses swapped for the dev
//!   Kafka and PostgreSQL), answer the health checks, count produced messages into the
//!   store, expose the metrics the rules use, and exit 0 on SIGTERM.
//!
//! What cannot be checked here (no Docker, no cluster, no Grafana): that the images
//! build, the manifests deploy, Grafana renders the panels.
//!
//! One module per part of the kit; `support` holds what they share.

mod support;

mod compose;
mod configs;
mod grafana;
mod image;
mod kubernetes;
pub(crate) mod process_stack;
mod prometheus_rules;
mod systemd;
