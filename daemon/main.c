/* llmprofd: loads the collectors, tracks the selected processes, and reports. */
#include <bpf/libbpf.h>
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "attach.h"
#include "core.skel.h"
#include "ggml.h"
#include "probe.h"
#include "log.h"
#include "procfs.h"
#include "render.h"
#include "snapshot.h"
#include "track.h"

struct daemon {
	struct lp_config cfg;
	struct lp_features features;
	struct lp_core core;
	struct lp_tracker tracker;
	struct lp_ggml ggml;
	struct ring_buffer *rb;
	struct event_base *base;
	struct event *ev_pending;
	char **symbol_lists[LP_SYM_NR]; /* from the command line, to free */
};

static const char *const default_matmul[] = {"ggml_compute_forward_mul_mat",
					     "ggml_compute_forward_mul_mat_id",
					     "iqk_mul_mat",
					     "iqk_mul_mat_4d",
					     "iqk_mul_mat_moe",
					     NULL};
static const char *const default_barrier[] = {"ggml_barrier", "GOMP_barrier", "__kmpc_barrier",
					      NULL};
static const char *const default_decode[] = {"llama_decode", NULL};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: llmprofd [OPTION]...\n"
		"Collects scheduler, futex, page-fault and ggml statistics of LLM inference\n"
		"processes in the kernel, with eBPF.\n"
		"\n"
		"Which processes: every process that maps one of the matmul functions (ggml),\n"
		"also those that start or dlopen their ggml backend later, and:\n"
		"  -p, --pid PID            track this process (repeatable)\n"
		"  -c, --comm NAME          track processes whose comm is NAME, also those that\n"
		"                           start later (repeatable)\n"
		"  -e, --exe GLOB           track processes whose executable path matches GLOB\n"
		"                           (repeatable)\n"
		"      --no-discover        track only those, not every ggml process\n"
		"\n"
		"ggml (LIST: comma-separated function names or fnmatch globs, mangled for C++):\n"
		"      --matmul-symbols LIST   default ggml_compute_forward_mul_mat,\n"
		"                           ggml_compute_forward_mul_mat_id, iqk_mul_mat,\n"
		"                           iqk_mul_mat_4d, iqk_mul_mat_moe\n"
		"      --barrier-symbols LIST  default ggml_barrier, GOMP_barrier, __kmpc_barrier\n"
		"      --decode-symbols LIST   default llama_decode\n"
		"      --sample-hz N        cpu-clock samples per second and CPU for the matmul\n"
		"                           and barrier shares (default 199; 0 = off)\n"
		"      --no-stack-scan      classify samples by instruction pointer only\n"
		"      --precise-duty SHARE share of time (0 to 1) with a uprobe on every matmul\n"
		"                           and barrier call: exact, but each call costs about\n"
		"                           3 us (default 0; 1 = always)\n"
		"      --precise-period S   length of one duty cycle (default 60)\n"
		"\n"
		"Reporting:\n"
		"      --once               print one JSON report on stdout and exit: after\n"
		"                           --seconds, on SIGINT/SIGTERM, or when every --pid\n"
		"                           process has exited\n"
		"  -s, --seconds S          with --once, report after S seconds\n"
		"\n"
		"Limits (kernel memory is printed at start):\n"
		"      --max-processes N    tracked processes at once (default 256)\n"
		"      --max-threads N      threads of tracked processes (default 16384)\n"
		"      --max-futex-addrs N  distinct futex addresses (default 8192)\n"
		"      --ringbuf-kib N      ring buffer for exec and exit records, a power of two\n"
		"                           (default 4096; an exit record is about 9 KiB)\n"
		"\n"
		"Collectors:\n"
		"      --sched-raw-tp       use raw_tp even where tp_btf programs load\n"
		"      --futex-source SRC   auto, tracepoint, raw (raw_syscalls) or off\n"
		"      --no-page-faults     do not count page faults\n"
		"      --no-mount-tracefs   do not mount tracefs when it is missing\n"
		"\n"
		"  -f, --foreground         accepted for clarity: llmprofd never forks\n"
		"  -v, --verbose            log debug messages, libbpf's included\n"
		"  -h, --help               show this help\n"
		"  -V, --version            show the version\n"
		"\n"
		"Examples:\n"
		"  llmprofd --comm llama-server\n"
		"  llmprofd --once --pid 4242 --seconds 10 > report.json\n");
}

static int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < min || v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int push(void *arrp, size_t *n, size_t size, const void *item)
{
	void **arr = arrp;
	void *a = realloc(*arr, (*n + 1) * size);

	if (!a)
		return -ENOMEM;
	memcpy((char *)a + *n * size, item, size);
	*arr = a;
	(*n)++;
	return 0;
}

enum {
	OPT_ONCE = 256,
	OPT_MAX_PROCESSES,
	OPT_MAX_THREADS,
	OPT_MAX_FUTEX,
	OPT_RINGBUF_KIB,
	OPT_SCHED_RAW,
	OPT_FUTEX_SOURCE,
	OPT_NO_FAULTS,
	OPT_NO_MOUNT,
	OPT_NO_DISCOVER,
	OPT_MATMUL_SYMS,
	OPT_BARRIER_SYMS,
	OPT_DECODE_SYMS,
	OPT_SAMPLE_HZ,
	OPT_NO_STACK_SCAN,
	OPT_PRECISE_DUTY,
	OPT_PRECISE_PERIOD,
};

/* "a,b*,c" -> {"a", "b*", "c", NULL}, in one allocation. */
static char **split_list(const char *s)
{
	size_t n = 1, len = strlen(s);
	char **v, *copy;

	for (const char *p = s; *p; p++)
		n += *p == ',';
	v = malloc((n + 1) * sizeof(*v) + len + 1);
	if (!v)
		return NULL;
	copy = (char *)(v + n + 1);
	memcpy(copy, s, len + 1);
	n = 0;
	for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ","))
		v[n++] = tok;
	v[n] = NULL;
	return v;
}

static int parse_double(const char *s, double min, double max, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || end == s || *end || !(*out >= min) || !(*out <= max) ? -EINVAL : 0;
}

/* Returns 0 to run, 1 to exit successfully (help, version), -EINVAL on bad usage. */
static int parse_args(struct daemon *d, int argc, char **argv)
{
	struct lp_config *cfg = &d->cfg;
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"comm", required_argument, NULL, 'c'},
		{"exe", required_argument, NULL, 'e'},
		{"once", no_argument, NULL, OPT_ONCE},
		{"seconds", required_argument, NULL, 's'},
		{"max-processes", required_argument, NULL, OPT_MAX_PROCESSES},
		{"max-threads", required_argument, NULL, OPT_MAX_THREADS},
		{"max-futex-addrs", required_argument, NULL, OPT_MAX_FUTEX},
		{"ringbuf-kib", required_argument, NULL, OPT_RINGBUF_KIB},
		{"sched-raw-tp", no_argument, NULL, OPT_SCHED_RAW},
		{"futex-source", required_argument, NULL, OPT_FUTEX_SOURCE},
		{"no-page-faults", no_argument, NULL, OPT_NO_FAULTS},
		{"no-mount-tracefs", no_argument, NULL, OPT_NO_MOUNT},
		{"no-discover", no_argument, NULL, OPT_NO_DISCOVER},
		{"matmul-symbols", required_argument, NULL, OPT_MATMUL_SYMS},
		{"barrier-symbols", required_argument, NULL, OPT_BARRIER_SYMS},
		{"decode-symbols", required_argument, NULL, OPT_DECODE_SYMS},
		{"sample-hz", required_argument, NULL, OPT_SAMPLE_HZ},
		{"no-stack-scan", no_argument, NULL, OPT_NO_STACK_SCAN},
		{"precise-duty", required_argument, NULL, OPT_PRECISE_DUTY},
		{"precise-period", required_argument, NULL, OPT_PRECISE_PERIOD},
		{"foreground", no_argument, NULL, 'f'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{}};
	int c;

	cfg->max_processes = 256;
	cfg->max_threads = 16384;
	cfg->max_futex_addrs = 8192;
	cfg->ringbuf_bytes = 4 << 20;
	cfg->faults = true;
	cfg->mount_tracefs = true;
	cfg->discover = true;
	cfg->symbols[LP_SYM_MATMUL] = default_matmul;
	cfg->symbols[LP_SYM_BARRIER] = default_barrier;
	cfg->symbols[LP_SYM_DECODE] = default_decode;
	cfg->sample_hz = 199;
	cfg->stack_scan = true;
	cfg->precise_period = 60;

	while ((c = getopt_long(argc, argv, "p:c:e:s:fvhV", opts, NULL)) != -1) {
		char *end, *s;
		pid_t pid;

		switch (c) {
		case 'p':
			if (lp_parse_pid(optarg, &pid) < 0) {
				log_error("--pid: '%s' is not a process id", optarg);
				return -EINVAL;
			}
			if (push(&cfg->pids, &cfg->npids, sizeof(pid), &pid) < 0)
				return -ENOMEM;
			break;
		case 'c':
			if (strlen(optarg) == 0 || strlen(optarg) > 15) {
				log_error("--comm: '%s' cannot be a comm (1 to 15 characters)",
					  optarg);
				return -EINVAL;
			}
			s = optarg;
			if (push(&cfg->comms, &cfg->ncomms, sizeof(s), &s) < 0)
				return -ENOMEM;
			break;
		case 'e':
			s = optarg;
			if (push(&cfg->exes, &cfg->nexes, sizeof(s), &s) < 0)
				return -ENOMEM;
			break;
		case OPT_ONCE:
			cfg->once = true;
			break;
		case 's':
			errno = 0;
			cfg->seconds = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(cfg->seconds > 0) ||
			    cfg->seconds > 1e7) {
				log_error("--seconds: '%s' is not a positive number", optarg);
				return -EINVAL;
			}
			break;
		case OPT_MAX_PROCESSES:
		case OPT_MAX_THREADS:
		case OPT_MAX_FUTEX: {
			uint32_t *dst = c == OPT_MAX_PROCESSES ? &cfg->max_processes
					: c == OPT_MAX_THREADS ? &cfg->max_threads
							       : &cfg->max_futex_addrs;
			const char *name = c == OPT_MAX_PROCESSES ? "--max-processes"
					   : c == OPT_MAX_THREADS ? "--max-threads"
								  : "--max-futex-addrs";

			if (parse_u32(optarg, 1, 1 << 22, dst) < 0) {
				log_error("%s: '%s' is not a number from 1 to %u", name, optarg,
					  1 << 22);
				return -EINVAL;
			}
			break;
		}
		case OPT_RINGBUF_KIB: {
			uint32_t kib;

			/* The kernel wants a power of two, at least a page. */
			if (parse_u32(optarg, 4, 1 << 20, &kib) < 0 || (kib & (kib - 1))) {
				log_error("--ringbuf-kib: '%s' is not a power of two from 4 to %u",
					  optarg, 1 << 20);
				return -EINVAL;
			}
			cfg->ringbuf_bytes = kib << 10;
			break;
		}
		case OPT_SCHED_RAW:
			cfg->sched_raw_tp = true;
			break;
		case OPT_FUTEX_SOURCE:
			if (!strcmp(optarg, "auto"))
				cfg->futex_source = LP_FUTEX_SRC_AUTO;
			else if (!strcmp(optarg, "tracepoint"))
				cfg->futex_source = LP_FUTEX_SRC_TRACEPOINT;
			else if (!strcmp(optarg, "raw"))
				cfg->futex_source = LP_FUTEX_SRC_RAW;
			else if (!strcmp(optarg, "off"))
				cfg->futex_source = LP_FUTEX_SRC_OFF;
			else {
				log_error(
					"--futex-source: '%s' is not auto, tracepoint, raw or off",
					optarg);
				return -EINVAL;
			}
			break;
		case OPT_NO_FAULTS:
			cfg->faults = false;
			break;
		case OPT_NO_MOUNT:
			cfg->mount_tracefs = false;
			break;
		case OPT_NO_DISCOVER:
			cfg->discover = false;
			break;
		case OPT_MATMUL_SYMS:
		case OPT_BARRIER_SYMS:
		case OPT_DECODE_SYMS: {
			int cls = c == OPT_MATMUL_SYMS	  ? LP_SYM_MATMUL
				  : c == OPT_BARRIER_SYMS ? LP_SYM_BARRIER
							  : LP_SYM_DECODE;
			char **v = split_list(optarg);

			if (!v)
				return -ENOMEM;
			free(d->symbol_lists[cls]);
			d->symbol_lists[cls] = v;
			cfg->symbols[cls] = (const char *const *)v;
			break;
		}
		case OPT_SAMPLE_HZ:
			if (parse_u32(optarg, 0, 10000, &cfg->sample_hz) < 0) {
				log_error("--sample-hz: '%s' is not a number from 0 to 10000",
					  optarg);
				return -EINVAL;
			}
			break;
		case OPT_NO_STACK_SCAN:
			cfg->stack_scan = false;
			break;
		case OPT_PRECISE_DUTY:
			if (parse_double(optarg, 0, 1, &cfg->precise_duty) < 0) {
				log_error("--precise-duty: '%s' is not a share from 0 to 1",
					  optarg);
				return -EINVAL;
			}
			break;
		case OPT_PRECISE_PERIOD:
			if (parse_double(optarg, 1, 86400, &cfg->precise_period) < 0) {
				log_error(
					"--precise-period: '%s' is not a number of seconds from 1 "
					"to 86400",
					optarg);
				return -EINVAL;
			}
			break;
		case 'f':
			break;
		case 'v':
			cfg->verbose = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'V':
			printf("llmprofd %s (abi %d)\n", LLMPROF_VERSION, LP_ABI_VERSION);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s'; see --help", argv[optind]);
		return -EINVAL;
	}
	if (cfg->seconds > 0 && !cfg->once) {
		log_error("--seconds goes with --once");
		return -EINVAL;
	}
	if (!cfg->discover && cfg->npids == 0 && cfg->ncomms == 0 && cfg->nexes == 0) {
		log_error("--no-discover needs --pid, --comm or --exe: nothing would be tracked");
		return -EINVAL;
	}
	return 0;
}

static bool libbpf_debug;

/* libbpf's messages in our log; its debug output (verifier logs and more) only with -v. */
static int libbpf_log(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[1024];
	size_t n;

	if (level == LIBBPF_DEBUG && !libbpf_debug)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	lp_log(level == LIBBPF_WARN   ? LOG_WARNING
	       : level == LIBBPF_INFO ? LOG_INFO
				      : LOG_DEBUG,
	       "libbpf: %s", buf);
	return 0;
}

static void log_memory(const struct lp_core *c)
{
	struct lp_map_usage u[12];
	size_t n = lp_core_map_usage(c, u, 12);
	char line[512];
	uint64_t total = 0;
	int len = 0;

	for (size_t i = 0; i < n && len < (int)sizeof(line); i++) {
		/* A ring buffer's max_entries is its size in bytes. */
		if (u[i].value_size == 0)
			len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s %u KiB",
					i ? ", " : "", u[i].name, u[i].max_entries >> 10);
		else
			len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s %u x %u B",
					i ? ", " : "", u[i].name, u[i].max_entries,
					u[i].value_size);
		total += u[i].memlock;
	}
	log_info("kernel maps: %s; %.1f MiB locked in all", line, (double)total / (1 << 20));
}

static int on_event(void *arg, void *data, size_t size)
{
	struct daemon *d = arg;
	__u32 type;

	if (size < sizeof(type))
		return 0;
	memcpy(&type, data, sizeof(type));
	if (type != LP_EV_MAP || size < sizeof(struct lp_ev_map))
		return lp_tracker_event(&d->tracker, data, size);
	lp_ggml_event(&d->ggml, data);
	/* Read the mappings a little later: the record comes from mmap's entry. */
	if (!evtimer_pending(d->ev_pending, NULL)) {
		struct timeval tv = {.tv_sec = 0, .tv_usec = 30000};

		evtimer_add(d->ev_pending, &tv);
	}
	return 0;
}

static void on_pending(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)fd;
	(void)what;
	if (lp_ggml_process_pending(&d->ggml)) {
		struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};

		evtimer_add(d->ev_pending, &tv);
	}
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)fd;
	(void)what;
	lp_ggml_tick(&d->ggml);
}

static void on_ringbuf(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)fd;
	(void)what;
	ring_buffer__consume(d->rb);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)what;
	if (fd >= 0)
		log_info("received SIG%s, stopping", sigabbrev_np((int)fd));
	event_base_loopbreak(d->base);
}

/* In --once mode with --pid targets (and no --comm/--exe), the report is due when the last
 * of them exits; processes found by their ggml symbols meanwhile are reported too. */
static void on_target_exit(void *userdata, struct lp_target *t)
{
	struct daemon *d = userdata;

	if (t)
		lp_ggml_on_exit(&d->ggml, t);
	if (!d->cfg.once || d->cfg.npids == 0 || d->cfg.ncomms || d->cfg.nexes)
		return;
	for (size_t i = 0; i < d->cfg.npids; i++) {
		struct lp_target *x = lp_tracker_find(&d->tracker, d->cfg.pids[i]);

		if (x && !x->exited)
			return;
	}
	event_base_loopbreak(d->base);
}

static int print_report(struct daemon *d)
{
	struct lp_report r;
	cJSON *json;
	char *text;
	int ret;

	ring_buffer__consume(d->rb);
	lp_tracker_reap(&d->tracker);
	ret = lp_report_build(&r, &d->core, &d->tracker, 0);
	if (ret < 0) {
		lp_report_free(&r);
		return log_error_errno(ret, "read maps: %m");
	}
	r.features = &d->features;
	json = lp_render_report(&r);
	text = json ? cJSON_Print(json) : NULL;
	if (text) {
		fputs(text, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	free(text);
	cJSON_Delete(json);
	lp_report_free(&r);
	return text ? 0 : log_error_errno(-ENOMEM, "render report: %m");
}

/* libevent's event_free() does not accept NULL. */
static void event_free_safe(struct event *ev)
{
	if (ev)
		event_free(ev);
}

static int run(struct daemon *d)
{
	struct event *ev_rb = NULL, *ev_int = NULL, *ev_term = NULL, *ev_timer = NULL;
	struct event *ev_tick = NULL;
	int r;

	sd_notify(0, "STATUS=Probing kernel features");
	lp_features_probe(&d->features, d->cfg.mount_tracefs);
	lp_features_log(&d->features);
	if (d->features.bpf_denied)
		return -EPERM;

	sd_notify(0, "STATUS=Loading BPF programs");
	r = lp_core_load(&d->core, &d->cfg, &d->features);
	if (r < 0)
		return r;
	log_info("collectors: scheduler via %s, futex via %s, page faults %s, new mappings via %s, "
		 "sampling at %u Hz on %d CPUs",
		 d->core.sched_variant, d->core.futex_source ? d->core.futex_source : "off",
		 d->core.faults ? "via perf software events" : "off",
		 d->core.mmap_source ? d->core.mmap_source : "nothing (off)", d->core.sample_hz,
		 d->core.nsample_cpus);
	log_memory(&d->core);

	lp_tracker_init(&d->tracker, &d->cfg, bpf_map__fd(d->core.skel->maps.procs),
			bpf_map__fd(d->core.skel->maps.futex_addrs));
	d->tracker.on_exit = on_target_exit;
	d->tracker.userdata = d;
	lp_ggml_init(&d->ggml, &d->cfg, &d->core, &d->tracker);
	d->rb = ring_buffer__new(bpf_map__fd(d->core.skel->maps.events), on_event, d, NULL);
	if (!d->rb)
		return log_error_errno(-errno, "create ring buffer reader: %m");

	for (size_t i = 0; i < d->cfg.npids; i++) {
		r = lp_tracker_add(&d->tracker, d->cfg.pids[i], "pid");
		if (r == -ESRCH)
			return log_error_errno(r, "--pid %d: no such process", (int)d->cfg.pids[i]);
		if (r < 0 && r != -EALREADY)
			return log_error_errno(r, "--pid %d: cannot track: %m",
					       (int)d->cfg.pids[i]);
	}
	r = lp_tracker_scan(&d->tracker);
	if (r < 0)
		return r;
	if (d->cfg.discover) {
		r = lp_ggml_scan_all(&d->ggml);
		if (r < 0)
			return r;
	} else {
		for (size_t i = 0; i < d->tracker.n; i++)
			lp_ggml_check(&d->ggml, d->tracker.v[i]);
	}

	d->base = event_base_new();
	if (!d->base)
		return log_error_errno(-ENOMEM, "create event loop: %m");
	d->ev_pending = evtimer_new(d->base, on_pending, d);
	ev_tick = event_new(d->base, -1, EV_PERSIST, on_tick, d);
	if (!d->ev_pending || !ev_tick ||
	    event_add(ev_tick, &(struct timeval){.tv_sec = 1, .tv_usec = 0})) {
		r = log_error_errno(-ENOMEM, "set up event loop: %m");
		goto out;
	}
	lp_ggml_tick(&d->ggml);
	ev_rb = event_new(d->base, ring_buffer__epoll_fd(d->rb), EV_READ | EV_PERSIST, on_ringbuf,
			  d);
	ev_int = evsignal_new(d->base, SIGINT, on_stop, d);
	ev_term = evsignal_new(d->base, SIGTERM, on_stop, d);
	if (!ev_rb || !ev_int || !ev_term || event_add(ev_rb, NULL) || event_add(ev_int, NULL) ||
	    event_add(ev_term, NULL)) {
		r = log_error_errno(-ENOMEM, "set up event loop: %m");
		goto out;
	}
	if (d->cfg.once && d->cfg.seconds > 0) {
		struct timeval tv = {
			.tv_sec = (time_t)d->cfg.seconds,
			.tv_usec = (suseconds_t)((d->cfg.seconds - (double)(time_t)d->cfg.seconds) *
						 1e6)};

		ev_timer = evtimer_new(d->base, on_stop, d);
		if (!ev_timer || evtimer_add(ev_timer, &tv)) {
			r = log_error_errno(-ENOMEM, "set up timer: %m");
			goto out;
		}
	}

	log_info("ready: tracking %zu process(es)", d->tracker.n);
	sd_notify(0, "READY=1\nSTATUS=Collecting");
	/* With only --pid targets that are all gone already, report at once. */
	if (d->cfg.npids)
		on_target_exit(d, NULL);
	event_base_dispatch(d->base);
	sd_notify(0, "STOPPING=1\nSTATUS=Stopping");

	r = d->cfg.once ? print_report(d) : 0;
out:
	event_free_safe(ev_tick);
	event_free_safe(d->ev_pending);
	d->ev_pending = NULL;
	event_free_safe(ev_timer);
	event_free_safe(ev_term);
	event_free_safe(ev_int);
	event_free_safe(ev_rb);
	return r;
}

int main(int argc, char **argv)
{
	struct daemon d = {};
	int r, ret;

	lp_log_init("llmprofd");
	r = parse_args(&d, argc, argv);
	if (r != 0) {
		ret = r > 0 ? 0 : 2;
		goto out;
	}
	if (d.cfg.verbose)
		lp_log_set_level(LOG_DEBUG);
	libbpf_debug = d.cfg.verbose;
	libbpf_set_print(libbpf_log);

	ret = run(&d) < 0 ? 1 : 0;

	if (d.base)
		event_base_free(d.base);
	ring_buffer__free(d.rb);
	/* Targets hold probe links: free them before the BPF object. */
	lp_tracker_free(&d.tracker);
	lp_ggml_free(&d.ggml);
	lp_core_destroy(&d.core);
out:
	free(d.cfg.pids);
	free(d.cfg.comms);
	free(d.cfg.exes);
	for (int i = 0; i < LP_SYM_NR; i++)
		free(d.symbol_lists[i]);
	return ret;
}
