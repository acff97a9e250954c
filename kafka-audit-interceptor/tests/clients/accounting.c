/*
 * The benchmark's accounting (bench/interceptor.sh), one definition for both test
 * clients: client.c and rdkafka_client.rs (build.rs links this file into both
 * programs). See accounting.h.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accounting.h"

#define MAX_THREADS 128
struct thread_time {
        int tid;
        char name[24];
        long long cpu_ns, wait_ns;
};

static int thread_times(struct thread_time *t) {
        int n = 0;
        DIR *d = opendir("/proc/self/task");
        struct dirent *e;
        if (!d)
                return 0;
        while ((e = readdir(d)) && n < MAX_THREADS) {
                if (e->d_name[0] == '.')
                        continue;
                char path[300]; /* d_name is up to 255 bytes */
                t[n].tid = atoi(e->d_name);
                snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
                FILE *f = fopen(path, "r");
                if (!f)
                        continue;
                int ok = fscanf(f, "%lld %lld", &t[n].cpu_ns, &t[n].wait_ns) == 2;
                fclose(f);
                snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
                f = fopen(path, "r");
                if (!f || !fgets(t[n].name, sizeof(t[n].name), f))
                        snprintf(t[n].name, sizeof(t[n].name), "?");
                if (f)
                        fclose(f);
                t[n].name[strcspn(t[n].name, "\n")] = '\0';
                if (ok)
                        n++;
        }
        closedir(d);
        return n;
}

/* Busy and total time of all CPUs, in ticks. */
static void machine_ticks(long long *busy, long long *total) {
        long long v[8] = {0};
        *busy = *total = 0;
        FILE *f = fopen("/proc/stat", "r");
        if (!f)
                return;
        if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8) {
                for (int i = 0; i < 8; i++)
                        *total += v[i];
                *busy = *total - v[3] - v[4]; /* not idle, not waiting for I/O */
        }
        fclose(f);
}

/* utime + stime of process `pid` in ticks (0 when it cannot be read). */
static long long process_ticks(long pid) {
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
                return 0;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *p = strrchr(buf, ')'); /* the name may hold spaces */
        long long utime = 0, stime = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld", &utime,
                        &stime) == 2)
                return utime + stime;
        return 0;
}

struct kai_accounting {
        struct thread_time threads[MAX_THREADS];
        int n;
        long long machine_busy, machine_total, broker;
};

struct kai_accounting *kai_account(long broker_pid) {
        struct kai_accounting *a = calloc(1, sizeof(*a));
        if (!a)
                return NULL;
        a->n = thread_times(a->threads);
        machine_ticks(&a->machine_busy, &a->machine_total);
        a->broker = broker_pid > 0 ? process_ticks(broker_pid) : 0;
        return a;
}

void kai_accounting_free(struct kai_accounting *a) {
        free(a);
}

char *kai_accounting_json(const struct kai_accounting *a, const struct kai_accounting *b) {
        char *json = NULL;
        size_t len = 0;
        if (!a || !b)
                return NULL;
        FILE *out = open_memstream(&json, &len);
        if (!out)
                return NULL;
        long ticks = sysconf(_SC_CLK_TCK);
        fprintf(out, "\"threads\": [");
        for (int i = 0; i < b->n; i++) {
                long long cpu = b->threads[i].cpu_ns, wait = b->threads[i].wait_ns;
                for (int j = 0; j < a->n; j++)
                        if (a->threads[j].tid == b->threads[i].tid) {
                                cpu -= a->threads[j].cpu_ns;
                                wait -= a->threads[j].wait_ns;
                        }
                fprintf(out, "%s{\"name\": \"%s\", \"main\": %s, \"cpu_ns\": %lld, \"wait_ns\": %lld}",
                        i ? ", " : "", b->threads[i].name,
                        b->threads[i].tid == getpid() ? "true" : "false", cpu, wait);
        }
        long long total = b->machine_total - a->machine_total;
        fprintf(out, "], \"machine_busy\": %.4f, \"cpus\": %ld, \"broker_cpu_s\": %.3f",
                total > 0 ? (double)(b->machine_busy - a->machine_busy) / (double)total : 0.0,
                sysconf(_SC_NPROCESSORS_ONLN), (double)(b->broker - a->broker) / (double)ticks);
        if (fclose(out) != 0) {
                free(json);
                return NULL;
        }
        return json;
}
