package io.kafkaaudit.interceptor;

import java.io.IOException;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.config.ConfigException;

/**
 * The {@code kafka_audit.*} properties of the client's own configuration, with the names
 * and meaning of the librdkafka plugin's (docs/plugin.md), each checked so that a bad
 * value fails the client's creation with a message that names the property.
 *
 * <table>
 *   <caption>Properties</caption>
 *   <tr><td>{@code kafka_audit.datacenter}</td><td>required</td></tr>
 *   <tr><td>{@code kafka_audit.tier}</td><td>default {@code producer} / {@code consumer}; none starting with {@code replicator:}</td></tr>
 *   <tr><td>{@code kafka_audit.event_time.config}</td><td>a TOML file: window_size, rules, default</td></tr>
 *   <tr><td>{@code kafka_audit.audit_topic}</td><td>default {@code _kafka_audit}</td></tr>
 *   <tr><td>{@code kafka_audit.bootstrap.servers}</td><td>default the client's own, with its security settings</td></tr>
 *   <tr><td>{@code kafka_audit.report.interval.ms}</td><td>default 10 000 (100 to 3 600 000)</td></tr>
 *   <tr><td>{@code kafka_audit.<producer property>}</td><td>for the audit producer (security, ...)</td></tr>
 * </table>
 */
final class AuditSettings {
  static final String PREFIX = "kafka_audit.";
  static final String DEFAULT_AUDIT_TOPIC = "_kafka_audit";
  static final long DEFAULT_REPORT_INTERVAL_MS = 10_000;

  final AuditJson.Identity identity;
  final EventTimeConfig eventTime;
  final String auditTopic;
  final long reportIntervalMs;
  /** The audit producer's properties (connection, security); the emitter adds the rest. */
  final Properties producer;
  final String clientId;

  private AuditSettings(
      AuditJson.Identity identity,
      EventTimeConfig eventTime,
      String auditTopic,
      long reportIntervalMs,
      Properties producer,
      String clientId) {
    this.identity = identity;
    this.eventTime = eventTime;
    this.auditTopic = auditTopic;
    this.reportIntervalMs = reportIntervalMs;
    this.producer = producer;
    this.clientId = clientId;
  }

  private static final Set<String> OWN =
      Set.of("datacenter", "tier", "event_time.config", "audit_topic", "bootstrap.servers", "report.interval.ms");

  /** Properties of the plugin the Java interceptors do not implement: refused, not ignored. */
  private static final Map<String, String> UNSUPPORTED =
      Map.of(
          "spool.dir", "the Java interceptors keep unsent reports in memory only (no spool)",
          "spool.max.bytes", "the Java interceptors keep unsent reports in memory only (no spool)",
          "max.block.ms", "the audit producer never waits in send(): a report it cannot send at once is sent with the next");

  /**
   * Client properties the audit producer inherits when it writes to the client's own
   * cluster (no {@code kafka_audit.bootstrap.servers}): where and how to connect.
   */
  private static boolean inherited(String name) {
    return name.equals(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG)
        || name.equals(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG)
        || name.equals(CommonClientConfigs.CLIENT_DNS_LOOKUP_CONFIG)
        || name.startsWith("sasl.")
        || name.startsWith("ssl.");
  }

  static AuditSettings from(Map<String, ?> configs, String defaultTier) {
    String datacenter = string(configs, "datacenter");
    if (datacenter == null) {
      throw new ConfigException(
          PREFIX + "datacenter is required (the datacenter this client's counts are reported for)");
    }
    checkName("datacenter", datacenter);
    String tier = string(configs, "tier");
    if (tier == null) {
      tier = defaultTier;
    }
    checkName("tier", tier);
    checkNotReserved(tier);
    String auditTopic = string(configs, "audit_topic");
    if (auditTopic == null) {
      auditTopic = DEFAULT_AUDIT_TOPIC;
    }
    checkTopic(auditTopic);
    long interval = DEFAULT_REPORT_INTERVAL_MS;
    String iv = string(configs, "report.interval.ms");
    if (iv != null) {
      try {
        interval = Long.parseLong(iv);
      } catch (NumberFormatException e) {
        interval = -1;
      }
      if (interval < 100 || interval > 3_600_000) {
        throw new ConfigException(PREFIX + "report.interval.ms", iv, "must be an integer from 100 to 3600000");
      }
    }
    EventTimeConfig eventTime;
    String file = string(configs, "event_time.config");
    if (file == null) {
      eventTime = EventTimeConfig.defaults();
    } else {
      String text;
      try {
        text = Files.readString(Path.of(file), StandardCharsets.UTF_8);
      } catch (IOException | RuntimeException e) {
        throw new ConfigException(PREFIX + "event_time.config: cannot read " + file + ": " + e);
      }
      try {
        eventTime = EventTimeConfig.fromToml(text);
      } catch (EventTimeConfig.Invalid e) {
        throw new ConfigException(PREFIX + "event_time.config: " + file + ": " + e.getMessage());
      }
    }
    // The audit producer: the client's connection unless told otherwise, then every
    // kafka_audit.<producer property>.
    Properties producer = new Properties();
    String bootstrap = string(configs, "bootstrap.servers");
    if (bootstrap == null) {
      for (Map.Entry<String, ?> e : configs.entrySet()) {
        if (inherited(e.getKey()) && e.getValue() != null) {
          producer.put(e.getKey(), render(e.getValue()));
        }
      }
      if (!producer.containsKey(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG)) {
        throw new ConfigException(PREFIX + "bootstrap.servers: the client has no bootstrap.servers to inherit");
      }
    } else if (bootstrap.isEmpty()) {
      throw new ConfigException(PREFIX + "bootstrap.servers is empty");
    } else {
      producer.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    }
    Set<String> producerNames = ProducerConfig.configNames();
    for (Map.Entry<String, ?> e : new TreeMap<String, Object>(configs).entrySet()) {
      if (!e.getKey().startsWith(PREFIX)) {
        continue;
      }
      String name = e.getKey().substring(PREFIX.length());
      if (OWN.contains(name)) {
        continue;
      }
      if (UNSUPPORTED.containsKey(name)) {
        throw new ConfigException(PREFIX + name + " is not supported: " + UNSUPPORTED.get(name));
      }
      if (!producerNames.contains(name)) {
        throw new ConfigException(
            "unknown property " + e.getKey() + ": neither a kafka_audit setting (" + String.join(", ", new java.util.TreeSet<>(OWN))
                + ") nor a Kafka producer property for the audit producer");
      }
      String value = render(e.getValue());
      checkProducerValue(name, value);
      producer.put(name, value);
    }
    Object cid = configs.get(CommonClientConfigs.CLIENT_ID_CONFIG);
    String clientId = cid == null ? "" : cid.toString();
    String host = host(clientId);
    return new AuditSettings(
        new AuditJson.Identity(tier, datacenter, host), eventTime, auditTopic, interval, producer, clientId);
  }

  private static final Map<String, ConfigDef.ConfigKey> PRODUCER_KEYS = ProducerConfig.configDef().configKeys();

  /**
   * A value for the audit producer, checked now as Kafka's definition of the property
   * checks it (its type, its validator), so that a bad one fails the client's creation
   * with its {@code kafka_audit.} name: the audit producer itself is only created on the
   * reporter's thread, where what Kafka refuses then (a trust store it cannot read) is
   * logged and counted, never thrown into the application.
   */
  private static void checkProducerValue(String name, String value) {
    ConfigDef.ConfigKey key = PRODUCER_KEYS.get(name);
    if (key == null) {
      return;
    }
    try {
      Object parsed = ConfigDef.parseType(name, value, key.type);
      if (key.validator != null) {
        key.validator.ensureValid(name, parsed);
      }
    } catch (RuntimeException e) {
      throw new ConfigException(PREFIX + name + " (for the audit producer): " + e.getMessage());
    }
  }

  /** A property's value as the client's config holds it (a String, or a parsed value). */
  private static String render(Object v) {
    if (v instanceof List) {
      StringBuilder b = new StringBuilder();
      for (Object o : (List<?>) v) {
        if (b.length() > 0) {
          b.append(',');
        }
        b.append(o);
      }
      return b.toString();
    }
    if (v instanceof Class) {
      return ((Class<?>) v).getName();
    }
    if (v instanceof org.apache.kafka.common.config.types.Password) {
      return ((org.apache.kafka.common.config.types.Password) v).value();
    }
    return v.toString();
  }

  private static String string(Map<String, ?> configs, String name) {
    Object v = configs.get(PREFIX + name);
    return v == null ? null : render(v).trim();
  }

  /** A tier, datacenter or host name as the collector accepts it. */
  static void checkName(String what, String v) {
    if (v.isEmpty() || v.length() > 255 || !v.chars().allMatch(AuditSettings::nameChar)) {
      throw new ConfigException(PREFIX + what, v, "must be 1-255 characters of A-Z a-z 0-9 . _ - : /");
    }
  }

  /**
   * Tiers under this prefix carry a replicator's evidence (common's
   * {@code EVIDENCE_TIER_PREFIX}, the librdkafka plugin's {@code RESERVED_TIER_PREFIX}),
   * which only the auditors of a replicated edge publish: a producer's or consumer's
   * interceptor never may (docs/design.md §10).
   */
  static final String RESERVED_TIER_PREFIX = "replicator:";

  /** A tier under {@link #RESERVED_TIER_PREFIX}, in any case, is refused. */
  static void checkNotReserved(String tier) {
    if (tier.regionMatches(true, 0, RESERVED_TIER_PREFIX, 0, RESERVED_TIER_PREFIX.length())) {
      throw new ConfigException(
          PREFIX + "tier",
          tier,
          "tiers starting with \"" + RESERVED_TIER_PREFIX + "\" are reserved: replication evidence comes only from the replicator's auditors");
    }
  }

  private static boolean nameChar(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || ".-_:/".indexOf(c) >= 0;
  }

  private static void checkTopic(String v) {
    boolean ok =
        !v.isEmpty()
            && v.length() <= 249
            && !v.equals(".")
            && !v.equals("..")
            && v.chars().allMatch(c -> (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || ".-_".indexOf(c) >= 0);
    if (!ok) {
      throw new ConfigException(PREFIX + "audit_topic", v, "not a Kafka topic name (1-249 characters of A-Z a-z 0-9 . _ -)");
    }
  }

  /** {@code hostname:pid/client.id}, in the characters the collector accepts. */
  static String host(String clientId) {
    String name;
    try {
      name = InetAddress.getLocalHost().getHostName();
    } catch (IOException | RuntimeException e) {
      name = System.getenv().getOrDefault("HOSTNAME", "unknown-host");
    }
    String h = sanitize(name, 150) + ":" + ProcessHandle.current().pid();
    if (!clientId.isEmpty()) {
      h += "/" + sanitize(clientId, 90);
    }
    return h;
  }

  private static String sanitize(String s, int max) {
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < s.length() && b.length() < max; i++) {
      char c = s.charAt(i);
      b.append((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || ".-_".indexOf(c) >= 0 ? c : '_');
    }
    return b.length() == 0 ? "unknown" : b.toString();
  }
}
