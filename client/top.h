/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The table of `llmprofctl top`: rows computed from two reads of the API's process
 * documents, sorted and formatted to fit 80 columns. Pure: no I/O, unit-tested. */
#ifndef LLMPROFCTL_TOP_H
#define LLMPROFCTL_TOP_H

#include "llmprofctl.h"

enum top_col {
	TC_PID,
	TC_COMM,
	TC_THR,
	TC_CPU,	  /* % of one CPU */
	TC_TOKS,  /* generated tokens per second of decoding */
	TC_MS50,  /* ms per generated token, p50 */
	TC_MS99,  /* and p99 */
	TC_MM,	  /* % of CPU samples in matmul functions */
	TC_SPIN,  /* % of CPU samples in barrier functions: spinning */
	TC_FTXS,  /* futex waits per second */
	TC_FTX99, /* futex wait p99, ns */
	TC_RQ99,  /* run-queue latency p99, ns */
	TC_MAJS,  /* major page faults per second */
	/* Shown where the terminal is wider than 80 columns, or chosen with -o: */
	TC_WTOKS,    /* generated tokens per second of wall-clock time */
	TC_MODEL,    /* the model file's name */
	TC_WORKLOAD, /* the service unit or container, else the command name */
	TC_REQS,     /* requests over per second (from llama_decode's batches) */
	TC_TTFT99,   /* time to first token of the requests over, p99, ns */
	TC_TPOT99,   /* time per output token, p99, ns */
	TC_OCC,	     /* sequences a decode carried, mean */
	/* Chosen with -o only: */
	TC_ENGINE, /* the engine it runs: ggml, torch */
	TC_NR,
};
#define TC_FIT_NR TC_ENGINE    /* the columns a wide terminal adds, up to here */
#define TC_DEFAULT_NR TC_WTOKS /* the columns that fit 80: PID to MAJ/S */

struct top_column {
	const char *name; /* header */
	const char *id;	  /* its name for -o */
	const char *json; /* its member in --json, named with its unit */
	int width;	  /* a negative width: left-aligned text */
	char key;	  /* the key that sorts by it in the interactive view, or 0 */
	const char *help; /* one line for the help screen and the man page */
};
extern const struct top_column top_columns[TC_NR];

/* One read: every process's document (GET /v1/processes/{pid}), in list order. */
struct top_snap {
	cJSON **docs;
	size_t n;
};
void top_snap_free(struct top_snap *s);
const cJSON *top_snap_find(const struct top_snap *s, int pid);

enum top_flag { TOP_FLAG_NONE, TOP_FLAG_INFO, TOP_FLAG_WARNING, TOP_FLAG_CRITICAL };

struct top_row {
	int pid;
	bool exited;
	char comm[20];
	char engine[16];
	char model[64];
	char workload[64];
	char mark; /* its worst finding: '!' critical, '*' warning, '+' info, ' ' none */
	/* The severity of the worst finding whose figure a column shows (enum top_flag). */
	unsigned char flag[TC_NR];
	bool scanned;	   /* its op shares rest on the stack scan (ggml.unwind): MM% reads "n?" */
	double v[TC_NR];   /* NAN where there is nothing to show */
	const cJSON *doc;  /* the current document (owned by the snapshot) */
	const cJSON *prev; /* the one of the previous read, NULL for the first or after a reset */
	double dt_ns;	   /* the interval: between the reads, else since tracked */
};

/* A thread, or (tid 0) what the threads that exited in the interval took: the process's
 * figures less its live threads', so that the rows add up to the process's. */
struct top_thread_row {
	int tid;
	char comm[20];
	double v[TC_NR]; /* NAN where a thread has no such figure */
};

struct top_op_row {
	char op[48];
	double share; /* percent of the process's samples in the interval */
};

/* Rows for cur against prev (NULL: since each process was tracked), exited processes only
 * with all. *rows is malloc'ed; 0 or -ENOMEM. */
int top_rows(const struct top_snap *cur, const struct top_snap *prev, bool all,
	     struct top_row **rows, size_t *n);
/* Busiest first for numbers, ascending for PID and COMMAND; reverse flips; ties by pid. */
void top_sort(struct top_row *rows, size_t n, enum top_col col, bool reverse);
/* The live threads of a row, busiest first, then the exited threads' row when the interval
 * has one (a previous read) and they took anything. *out is malloc'ed; the count, or
 * -ENOMEM. */
int top_threads(const struct top_row *r, struct top_thread_row **out);

/* The ops of a row over its interval, the busiest first (at most max). *out is malloc'ed;
 * the count, or -ENOMEM. */
int top_ops(const struct top_row *r, struct top_op_row **out, int max);
#define TOP_OPS_SHOWN 5 /* the ops shown under a process (-O) */

/* Which columns, in which order: -o's list, or the default ones and as many more as fit;
 * and each one's width (top_columns'; COMMAND grows to a whole name where there is room). */
struct top_layout {
	int n;
	enum top_col col[TC_NR];
	int width[TC_NR];
};
/* "pid,comm,model,cpu": 0, or -EINVAL with the unknown name in err. */
int top_layout_parse(const char *list, struct top_layout *l, char *err, size_t errlen);
/* The default columns (79 characters); where width allows, COMMAND widened to a whole name
 * (15 characters), then TC_WTOKS, TC_MODEL, TC_WORKLOAD, ... (to TC_FIT_NR) while the line
 * stays shorter. */
void top_layout_fit(struct top_layout *l, int width);
/* Where column c starts in a line of layout l, and its width: false when l does not show it. */
bool top_layout_find(const struct top_layout *l, enum top_col c, int *x, int *width);

/* The lines of the table; the default layout makes 79 characters, so 80 columns never wrap. */
#define TOP_LINE 512
void top_format_header(char *buf, const struct top_layout *l);
void top_format_row(char *buf, const struct top_row *r, const struct top_layout *l);
void top_format_thread(char *buf, const struct top_thread_row *t, const struct top_layout *l);
void top_format_op(char *buf, const struct top_op_row *o);
/* A row's mark is the first character of its PID cell (the PID right-aligned after it), so
 * it never touches the next column. */

/* The host, from /proc/stat and /proc/loadavg (read by the caller). */
struct top_host {
	double load[3];
	int cpus;
	double busy, total; /* ticks busy and in all, summed over the CPUs */
};
/* Parses /proc/stat's first line and count of cpuN lines, and /proc/loadavg: 0 or -EINVAL. */
int top_host_parse(const char *stat, const char *loadavg, struct top_host *h);
/* "host  load 1.20 0.80 0.50  2 CPUs  busy 180% = LLM 150% + other 30%", CPU in % of one
 * CPU over the interval; the busy part only with a previous read. */
void top_format_host(char *buf, const struct top_host *now, const struct top_host *prev,
		     const struct top_row *rows, size_t n);

/* --json: a row as an object, a member per column named top_columns[].json (null where the
 * table prints '-'; comm as the daemon wrote it, exited apart), with its worst finding and
 * its interval; with threads, "threads" (tid null: what threads that exited in the
 * interval took), with ops, its leading ops. NULL when out of memory. */
cJSON *top_row_json(const struct top_row *r, bool threads, bool ops);
/* The host line as an object: load, cpus, and the busy split (null on the first read). */
cJSON *top_host_json(const struct top_host *now, const struct top_host *prev,
		     const struct top_row *rows, size_t n);

#endif
