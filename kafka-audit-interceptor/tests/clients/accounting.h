/*
 * The benchmark's accounting (bench/interceptor.sh), shared by both test clients (the C
 * one, client.c, and the rust-rdkafka one, rdkafka_client.rs): each thread's CPU time
 * and time spent runnable but waiting for a CPU (/proc/self/task/<tid>/schedstat, ns),
 * with its name; the machine's busy and total time (/proc/stat); another process's CPU
 * time (kai.broker_pid: the broker's). Taken when the first message is produced and
 * after the flush, so the differences are the producer's work on exactly those messages.
 */
#ifndef KAI_ACCOUNTING_H
#define KAI_ACCOUNTING_H

struct kai_accounting;

/* A snapshot now; broker_pid > 0 also reads that process's CPU time. NULL if out of
 * memory. Free with kai_accounting_free. */
struct kai_accounting *kai_account(long broker_pid);

/* The differences from `a` to `b` as JSON object members (no braces): "threads" (per
 * thread, in `b`'s order: name, whether it is the program's own thread, CPU and
 * run-queue wait in ns), "machine_busy" (the fraction of all CPUs' time), "cpus",
 * "broker_cpu_s". A malloc'ed string for free(), or NULL. */
char *kai_accounting_json(const struct kai_accounting *a, const struct kai_accounting *b);

void kai_accounting_free(struct kai_accounting *a);

#endif
