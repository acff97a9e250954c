/*
 * A C producer and consumer on librdkafka's C API, linked with the workspace's
 * librdkafka (rdkafka-sys builds it with cmake, statically), used by the plugin's tests
 * the way a C application uses the plugin: properties on the command line, in order
 * (plugin.library.paths first). See tests/clients/c_client.rs for the command line.
 *
 * The few librdkafka declarations it needs are written out below (librdkafka's stable
 * C ABI) rather than taken from rdkafka.h, which the crate cannot locate in
 * rdkafka-sys's build.
 */
#include <dlfcn.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "accounting.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;
typedef struct {
        int err;
        rd_kafka_topic_t *rkt;
        int32_t partition;
        void *payload;
        size_t len;
        void *key;
        size_t key_len;
        int64_t offset;
        void *_private;
} rd_kafka_message_t;

rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
void rd_kafka_conf_destroy(rd_kafka_conf_t *);
void rd_kafka_conf_set_dr_msg_cb(rd_kafka_conf_t *,
                                 void (*)(rd_kafka_t *, const rd_kafka_message_t *, void *));
rd_kafka_t *rd_kafka_new(int, rd_kafka_conf_t *, char *, size_t);
void rd_kafka_destroy(rd_kafka_t *);
rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *, const char *, void *);
void rd_kafka_topic_destroy(rd_kafka_topic_t *);
int rd_kafka_produce(rd_kafka_topic_t *, int32_t, int, void *, size_t, const void *, size_t,
                     void *);
int rd_kafka_produce_batch(rd_kafka_topic_t *, int32_t, int, rd_kafka_message_t *, int);
int rd_kafka_purge(rd_kafka_t *, int);
#define PURGE_F_QUEUE 0x1
int rd_kafka_poll(rd_kafka_t *, int);
int rd_kafka_flush(rd_kafka_t *, int);
int rd_kafka_last_error(void);
const char *rd_kafka_err2str(int);
int rd_kafka_poll_set_consumer(rd_kafka_t *);
rd_kafka_topic_partition_list_t *rd_kafka_topic_partition_list_new(int);
void *rd_kafka_topic_partition_list_add(rd_kafka_topic_partition_list_t *, const char *, int32_t);
void rd_kafka_topic_partition_list_destroy(rd_kafka_topic_partition_list_t *);
int rd_kafka_subscribe(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);
rd_kafka_message_t *rd_kafka_consumer_poll(rd_kafka_t *, int);
void rd_kafka_message_destroy(rd_kafka_message_t *);
int rd_kafka_consumer_close(rd_kafka_t *);

#define PARTITION_UA (-1)
#define PRODUCER 0
#define CONSUMER 1
#define MSG_F_COPY 0x2
#define ERR_QUEUE_FULL (-184)

static long delivered, failed;
/* The first delivery report's error (1: delivered), for harm's produce-batch. */
static int first_err = 0;

/* Prints {"error": "<what>: <why>"} with the text escaped for JSON, and exits. */
static void fail(const char *what, const char *why) {
        printf("{\"error\": \"%s: ", what);
        for (const char *c = why; *c; c++) {
                if (*c == '"' || *c == '\\')
                        putchar('\\');
                if ((unsigned char)*c >= 0x20)
                        putchar(*c);
        }
        printf("\"}\n");
        fflush(stdout);
        exit(2);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
        (void)rk;
        (void)opaque;
        if (m->err)
                failed++;
        else
                delivered++;
        if (!first_err)
                first_err = m->err ? m->err : 1;
}

/* The configuration of a client of `type` with the properties `props[0..n]`
 * ("name=value", in order), plugin.library.paths replaced by `plugin` when not NULL;
 * bootstrap.servers from the command line. */
static const char *bootstrap;

static rd_kafka_conf_t *configuration(int type, char **props, int n, const char *plugin) {
        char errstr[512];
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof(errstr));
        if (type == PRODUCER)
                rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
        for (int i = 0; i < n; i++) {
                char *eq = strchr(props[i], '=');
                if (!eq || !strncmp(props[i], "kai.", 4))
                        continue; /* this program's own options */
                *eq = '\0';
                const char *value = eq + 1;
                if (plugin && !strcmp(props[i], "plugin.library.paths"))
                        value = plugin;
                int r = rd_kafka_conf_set(conf, props[i], value, errstr, sizeof(errstr));
                *eq = '=';
                if (r != 0)
                        fail("config", errstr);
        }
        return conf;
}

/* A client of that configuration; a failure ends the program with its reason. */
static rd_kafka_t *client(int type, char **props, int n, const char *plugin) {
        char errstr[512];
        rd_kafka_t *rk = rd_kafka_new(type, configuration(type, props, n, plugin), errstr,
                                      sizeof(errstr));
        if (!rk)
                fail("create", errstr);
        return rk;
}

static const char *option(char **props, int n, const char *name) {
        size_t len = strlen(name);
        for (int i = 0; i < n; i++)
                if (!strncmp(props[i], name, len) && props[i][len] == '=')
                        return props[i] + len + 1;
        return NULL;
}

/* The value's size (kai.size: a "pad" field fills it up), and each produce() call's
 * duration in ns (for the benchmark's p99 added to produce()). */
static int value_size;
/* kai.fail_every=K: message i with i % K == K - 1 goes to partition PARTITIONS, which
 * the topic has not: its delivery fails (at once, or in its delivery report). */
static long fail_every;
static long long *call_ns;
static long calls;

static long long now_ns(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp_ll(const void *a, const void *b) {
        long long x = *(const long long *)a, y = *(const long long *)b;
        return (x > y) - (x < y);
}

/* Message i: key k<i>, JSON with its id and event time, to partition i % partitions. */
static void produce_one(rd_kafka_t *rk, rd_kafka_topic_t *rkt, long i, long long base,
                        long long span, long count, int partitions) {
        char key[32], value[4096];
        int klen = snprintf(key, sizeof(key), "k%ld", i);
        long long ts = base + (long long)i * span / count;
        int vlen = snprintf(value, sizeof(value), "{\"id\":%ld,\"ts\":%lld}", i, ts);
        if (value_size > vlen + 10 && value_size < (int)sizeof(value)) {
                /* ,"pad":"000…"} in place of the closing brace: a memset, not printf's
                 * padding, which cost more than produce() itself at 1 KB. */
                int pad = value_size - vlen - 9; /* ,"pad":"" */
                memcpy(value + vlen - 1, ",\"pad\":\"", 8);
                memset(value + vlen + 7, '0', (size_t)pad);
                memcpy(value + vlen + 7 + pad, "\"}", 2);
                vlen = value_size;
        }
        int32_t partition = (int32_t)(i % partitions);
        if (fail_every > 0 && i % fail_every == fail_every - 1)
                partition = partitions;
        long long t0 = now_ns();
        while (rd_kafka_produce(rkt, partition, MSG_F_COPY, value, (size_t)vlen, key,
                                (size_t)klen, NULL) == -1) {
                if (rd_kafka_last_error() != ERR_QUEUE_FULL) {
                        if (partition != partitions)
                                fail("produce", rd_kafka_err2str(rd_kafka_last_error()));
                        failed++; /* refused at once: no delivery report comes */
                        break;
                }
                rd_kafka_poll(rk, 10);
        }
        if (call_ns)
                call_ns[calls++] = now_ns() - t0;
        rd_kafka_poll(rk, 0);
}

/* Counts the entries of /proc/self/<dir> (fd, task). */
static int entries(const char *dir) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/%s", dir);
        int n = 0;
        DIR *d = opendir(path);
        struct dirent *e;
        if (!d)
                return -1;
        while ((e = readdir(d)))
                if (e->d_name[0] != '.')
                        n++;
        closedir(d);
        return n - !strcmp(dir, "fd"); /* the directory's own descriptor */
}

static int threads(void) { return entries("task"); }

/* produce BOOTSTRAP TOPIC COUNT BASE_MS SPAN_MS PARTITIONS [PROP=VALUE...]
 *   kai.clients=K      K producers in one process, messages round-robin over them
 *   kai.alt_plugin=P   every second producer loads the plugin from path P
 *   kai.fork=M         after the flush, a forked child destroys the inherited
 *                      producers, then produces M more messages (ids COUNT..) with a
 *                      producer of its own (librdkafka 2.12 itself crashed destroying
 *                      three inherited producers in a child; one it survives)
 *   kai.size=S         values of S bytes (a "pad" field fills them up)
 *   kai.fail_every=K   every K-th message to a partition the topic has not (fails)
 *   kai.rate=R         R messages a second (default: as fast as produce() takes them),
 *                      each produce() call timed (produce_p50_ns, produce_p99_ns; else 0)
 *   kai.broker_pid=P   also report the CPU time process P spent meanwhile
 * Prints {"delivered", "failed", "plugin_loaded_after", "threads_after", "seconds" (first
 * produce to the last flush), "cpu_s" (the process's, to its exit), "produce_p50_ns",
 * "produce_p99_ns", and from the first produce to the last flush: "threads" (each
 * one's CPU and run-queue wait), "machine_busy", "cpus", "broker_cpu_s"}. */
static int produce(int argc, char **argv) {
        const char *topic = argv[3];
        long count = atol(argv[4]);
        long long base = atoll(argv[5]), span = atoll(argv[6]);
        int partitions = atoi(argv[7]);
        char **props = argv + 8;
        int n = argc - 8;
        const char *k = option(props, n, "kai.clients");
        const char *alt = option(props, n, "kai.alt_plugin");
        const char *fork_more = option(props, n, "kai.fork");
        const char *plugin = option(props, n, "plugin.library.paths");
        int clients = k ? atoi(k) : 1;
        const char *size = option(props, n, "kai.size");
        value_size = size ? atoi(size) : 0;
        const char *fails = option(props, n, "kai.fail_every");
        fail_every = fails ? atol(fails) : 0;

        rd_kafka_t *rk[16];
        rd_kafka_topic_t *rkt[16];
        if (clients < 1 || clients > 16)
                return 2;
        for (int c = 0; c < clients; c++) {
                rk[c] = client(PRODUCER, props, n, (alt && c % 2) ? alt : NULL);
                rkt[c] = rd_kafka_topic_new(rk[c], topic, NULL);
        }
        const char *rate_opt = option(props, n, "kai.rate");
        double rate = rate_opt ? atof(rate_opt) : 0;
        /* produce() calls are timed when paced only: at full speed two clock reads per
         * message would be a good part of what the producer itself spends. */
        if (rate > 0)
                call_ns = calloc((size_t)count + 1, sizeof(*call_ns));
        const char *broker_opt = option(props, n, "kai.broker_pid");
        long broker_pid = broker_opt ? atol(broker_opt) : 0;
        struct kai_accounting *before = kai_account(broker_pid), *after = NULL;
        long long started = now_ns();
        for (long i = 0; i < count; i++) {
                if (rate > 0 && i % 64 == 0) {
                        /* Paced: wait out the time until message i is due (in sleeps, so
                         * the wait is no CPU of this thread's). */
                        long long due = started + (long long)((double)i * 1e9 / rate);
                        long long left = due - now_ns();
                        if (left > 0) {
                                struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
                                nanosleep(&ts, NULL);
                        }
                }
                produce_one(rk[i % clients], rkt[i % clients], i, base, span, count, partitions);
        }
        for (int c = 0; c < clients; c++)
                rd_kafka_flush(rk[c], 30000);
        double seconds = (double)(now_ns() - started) / 1e9;
        after = kai_account(broker_pid);
        long long p50 = 0, p99 = 0;
        if (calls > 0) {
                qsort(call_ns, (size_t)calls, sizeof(*call_ns), cmp_ll);
                p50 = call_ns[calls / 2];
                p99 = call_ns[calls * 99 / 100];
        }
        long forked = calls;
        call_ns = NULL; /* the child's messages are not timed */
        if (fork_more) {
                fflush(stdout);
                pid_t child = fork();
                if (child == 0) {
                        /* librdkafka's threads did not come along: destroying the
                         * inherited clients runs the plugin's close in the child, which
                         * must not report the parent's counts. */
                        for (int c = 0; c < clients; c++) {
                                rd_kafka_topic_destroy(rkt[c]);
                                rd_kafka_destroy(rk[c]);
                        }
                        long more = atol(fork_more);
                        rd_kafka_t *own = client(PRODUCER, props, n, NULL);
                        rd_kafka_topic_t *own_t = rd_kafka_topic_new(own, topic, NULL);
                        for (long i = count; i < count + more; i++)
                                produce_one(own, own_t, i, base, span, count + more, partitions);
                        rd_kafka_flush(own, 30000);
                        rd_kafka_topic_destroy(own_t);
                        rd_kafka_destroy(own);
                        _exit(failed ? 1 : 0);
                }
                int status = 0;
                waitpid(child, &status, 0);
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                        printf("{\"error\": \"forked child failed: %d\"}\n", status);
                        return 2;
                }
        }
        for (int c = 0; c < clients; c++) {
                rd_kafka_topic_destroy(rkt[c]);
                rd_kafka_destroy(rk[c]);
        }
        int loaded = plugin && dlopen(plugin, RTLD_NOW | RTLD_NOLOAD) != NULL;
        if (alt && dlopen(alt, RTLD_NOW | RTLD_NOLOAD))
                loaded = 1;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                     (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
        printf("{\"delivered\": %ld, \"failed\": %ld, \"plugin_loaded_after\": %s, "
               "\"threads_after\": %d, \"seconds\": %.6f, \"cpu_s\": %.6f, "
               "\"produce_calls\": %ld, \"produce_p50_ns\": %lld, \"produce_p99_ns\": %lld, ",
               delivered, failed, loaded ? "true" : "false", threads(), seconds, cpu, forked,
               p50, p99);
        char *accounting = kai_accounting_json(before, after);
        printf("%s}\n", accounting ? accounting : "\"accounting\": null");
        free(accounting);
        kai_accounting_free(before);
        kai_accounting_free(after);
        return 0;
}

/* consume BOOTSTRAP TOPIC GROUP EXPECTED TIMEOUT_S [PROP=VALUE...]
 * Reads until EXPECTED messages or the timeout, then closes (committing).
 * Prints {"consumed"}. */
static int consume(int argc, char **argv) {
        const char *topic = argv[3];
        long expected = atol(argv[5]);
        time_t until = time(NULL) + atol(argv[6]);
        char group[300];
        snprintf(group, sizeof(group), "group.id=%s", argv[4]);
        char *props[64];
        int n = 0;
        /* client() writes into its properties: no string literals. */
        props[n++] = strdup("auto.offset.reset=earliest");
        for (int i = 7; i < argc && n < 62; i++)
                props[n++] = argv[i];
        props[n++] = group;
        rd_kafka_t *rk = client(CONSUMER, props, n, NULL);
        rd_kafka_poll_set_consumer(rk);
        rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(subs, topic, -1);
        rd_kafka_subscribe(rk, subs);
        rd_kafka_topic_partition_list_destroy(subs);
        long consumed = 0;
        while (consumed < expected && time(NULL) < until) {
                rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
                if (!m)
                        continue;
                if (!m->err)
                        consumed++;
                rd_kafka_message_destroy(m);
        }
        rd_kafka_consumer_close(rk);
        rd_kafka_destroy(rk);
        printf("{\"consumed\": %ld}\n", consumed);
        return 0;
}


/* The plugin's kafka_audit_interceptor_stats() JSON (of the copy loaded from
 * `plugin`), or null when it is not loaded. The caller frees it. */
static char *plugin_stats(const char *plugin) {
        void *h = plugin ? dlopen(plugin, RTLD_NOW | RTLD_NOLOAD) : NULL;
        size_t (*stats)(char *, size_t) =
            h ? (size_t(*)(char *, size_t))dlsym(h, "kafka_audit_interceptor_stats") : NULL;
        if (!stats)
                return strdup("null");
        size_t size = stats(NULL, 0) + 1;
        char *buf = malloc(size);
        stats(buf, size);
        return buf;
}

/* harm BOOTSTRAP CASE [PROP=VALUE...]: one case of the fault matrix of the plugin's
 * host (docs/plugin.md), as an application meets it; prints one JSON line with what the
 * application saw and the plugin's stats ("plugin").
 *   produce-batch  one produce() to kai.topic, which the cluster has not, until its
 *                  delivery report says so; then rd_kafka_produce_batch of 1000
 *                  messages there, from a calloc'ed array (rkt NULL) and from a
 *                  malloc'ed one filled with 0xa5 (rkt garbage): {"first_err",
 *                  "batches": [[queued, with an error], ...]}
 *   failed-new     rd_kafka_new fails (the properties make it: e.g. an ssl.ca.location
 *                  that does not exist), then the configuration is destroyed, as
 *                  the API asks: {"created", "error", "threads_before", "threads_after"}
 *   churn          kai.clients=N producers created and destroyed one after another,
 *                  each producing one message to kai.topic: {"fds_before", "fds_after",
 *                  "threads_before", "threads_after", "delivered"}
 *   abandon        kai.count=N messages to kai.topic: the first half purged from the
 *                  queue as soon as produced, a flush that times out at once, the
 *                  second half produced and the client destroyed with them in flight
 *                  (no flush): {"produced", "delivered", "failed"} as the application
 *                  saw them (reports of messages failed at destroy never reach it) */
static int harm(int argc, char **argv) {
        const char *what = argv[3];
        char **props = argv + 4;
        int n = argc - 4;
        const char *plugin = option(props, n, "plugin.library.paths");
        const char *topic = option(props, n, "kai.topic");
        char errstr[512];
        if (!strcmp(what, "produce-batch")) {
                rd_kafka_t *rk = client(PRODUCER, props, n, NULL);
                rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
                if (rd_kafka_produce(rkt, PARTITION_UA, MSG_F_COPY, "{}", 2, NULL, 0, NULL) == -1)
                        first_err = rd_kafka_last_error();
                time_t until = time(NULL) + 60;
                while (!first_err && time(NULL) < until)
                        rd_kafka_poll(rk, 100);
                printf("{\"first_err\": %d, \"batches\": [", first_err);
                for (int b = 0; b < 2; b++) {
                        enum { N = 1000 };
                        rd_kafka_message_t *ms = b == 0 ? calloc(N, sizeof(*ms)) : malloc(N * sizeof(*ms));
                        if (b == 1)
                                memset(ms, 0xa5, N * sizeof(*ms));
                        char value[N][16];
                        for (int i = 0; i < N; i++) {
                                ms[i].payload = value[i];
                                ms[i].len = (size_t)snprintf(value[i], sizeof(value[i]), "{\"id\":%d}", i);
                                ms[i].key = NULL;
                                ms[i].key_len = 0;
                                ms[i]._private = NULL;
                                ms[i].err = 0;
                        }
                        int queued = rd_kafka_produce_batch(rkt, PARTITION_UA, MSG_F_COPY, ms, N);
                        int errors = 0;
                        for (int i = 0; i < N; i++)
                                errors += ms[i].err != 0;
                        printf("%s[%d, %d]", b ? ", " : "", queued, errors);
                        free(ms);
                }
                rd_kafka_topic_destroy(rkt);
                rd_kafka_flush(rk, 10000);
                rd_kafka_destroy(rk);
                printf("], ");
        } else if (!strcmp(what, "failed-new")) {
                int before = entries("task");
                rd_kafka_conf_t *conf = configuration(PRODUCER, props, n, NULL);
                rd_kafka_t *rk = rd_kafka_new(PRODUCER, conf, errstr, sizeof(errstr));
                if (rk) {
                        rd_kafka_destroy(rk);
                } else {
                        rd_kafka_conf_destroy(conf); /* rd_kafka_new took it only on success */
                }
                printf("{\"created\": %s, \"error\": \"", rk ? "true" : "false");
                for (const char *c = rk ? "" : errstr; *c; c++)
                        if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
                                putchar(*c);
                printf("\", \"threads_before\": %d, \"threads_after\": %d, ", before, entries("task"));
        } else if (!strcmp(what, "churn")) {
                const char *k = option(props, n, "kai.clients");
                int clients = k ? atoi(k) : 1;
                int fds = entries("fd"), threads_before = entries("task");
                for (int c = 0; c < clients; c++) {
                        rd_kafka_t *rk = client(PRODUCER, props, n, NULL);
                        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
                        produce_one(rk, rkt, c, 0, 1, clients, 1);
                        rd_kafka_flush(rk, 30000);
                        rd_kafka_topic_destroy(rkt);
                        rd_kafka_destroy(rk);
                }
                printf("{\"fds_before\": %d, \"fds_after\": %d, \"threads_before\": %d, "
                       "\"threads_after\": %d, \"delivered\": %ld, ",
                       fds, entries("fd"), threads_before, entries("task"), delivered);
        } else if (!strcmp(what, "abandon")) {
                const char *c = option(props, n, "kai.count");
                long count = c ? atol(c) : 1000;
                long long base = now_ns() / 1000000;
                rd_kafka_t *rk = client(PRODUCER, props, n, NULL);
                rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
                for (long i = 0; i < count / 2; i++)
                        produce_one(rk, rkt, i, base, 1000, count, 1);
                rd_kafka_purge(rk, PURGE_F_QUEUE);
                rd_kafka_flush(rk, 0);
                for (long i = count / 2; i < count; i++)
                        produce_one(rk, rkt, i, base, 1000, count, 1);
                rd_kafka_topic_destroy(rkt);
                rd_kafka_destroy(rk);
                printf("{\"produced\": %ld, \"delivered\": %ld, \"failed\": %ld, ", count,
                       delivered, failed);
        } else {
                fprintf(stderr, "harm: unknown case %s\n", what);
                return 2;
        }
        char *stats = plugin_stats(plugin);
        printf("\"plugin\": %s}\n", stats);
        free(stats);
        return 0;
}

int kai_c_client_main(int argc, char **argv) {
        bootstrap = argc > 2 ? argv[2] : "";
        if (argc >= 8 && !strcmp(argv[1], "produce"))
                return produce(argc, argv);
        if (argc >= 7 && !strcmp(argv[1], "consume"))
                return consume(argc, argv);
        if (argc >= 4 && !strcmp(argv[1], "harm"))
                return harm(argc, argv);
        fprintf(stderr,
                "usage: %s produce BOOTSTRAP TOPIC COUNT BASE_MS SPAN_MS PARTITIONS [PROP=VALUE...]\n"
                "       %s consume BOOTSTRAP TOPIC GROUP EXPECTED TIMEOUT_S [PROP=VALUE...]\n"
                "       %s harm BOOTSTRAP CASE [PROP=VALUE...]\n",
                argv[0], argv[0], argv[0]);
        return 2;
}
