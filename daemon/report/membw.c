// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Measuring the host's memory read bandwidth (membw.h). */
#include "report/membw.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "report/state.h"
#include "tracked/track.h"

#define LP_MEMBW_FILE "membw.json"
#define LP_MEMBW_FORMAT 1

static double mono(void)
{
	return (double)lp_now_ns() / 1e9;
}

struct reader {
	const uint64_t *p;
	size_t words;
	double seconds;
	pthread_barrier_t *start;
	uint64_t bytes;
	double elapsed;
	uint64_t sink;
};

typedef uint64_t lp_v4 __attribute__((vector_size(32)));

/* Reads its part again and again for the round's time, 32-byte vectors into four sums (the
 * AVX2 clone where the CPU has it: SSE2's 16-byte loads read 10-20 % slower here). The
 * sanitizers would time their own checks instead of the memory. */
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
/* clang refuses target_clones beside no_sanitize: its builds keep the clone. */
#if !defined(__clang__)
__attribute__((no_sanitize("address", "undefined")))
#endif
static void *
read_part(void *arg)
{
	struct reader *r = arg;
	lp_v4 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
	double t0;

	pthread_barrier_wait(r->start);
	t0 = mono();
	do {
		const lp_v4 *p = (const lp_v4 *)(const void *)r->p;
		const lp_v4 *end = p + r->words / 4;

		for (; p < end; p += 4) {
			s0 += p[0];
			s1 += p[1];
			s2 += p[2];
			s3 += p[3];
		}
		r->bytes += r->words * 8;
		r->elapsed = mono() - t0;
	} while (r->elapsed < r->seconds);
	s0 += s1 + s2 + s3;
	r->sink = s0[0] ^ s0[1] ^ s0[2] ^ s0[3];
	return NULL;
}

double lp_membw_measure(unsigned threads, uint64_t bytes, double seconds, int rounds)
{
	/* whole pages each: every part is aligned for 32-byte loads, a multiple of 16 words */
	size_t per = (size_t)(bytes / threads) & ~(size_t)4095;
	struct reader *rd = calloc(threads, sizeof(*rd));
	pthread_t *tid = calloc(threads, sizeof(*tid));
	double best = -ENOMEM;
	pthread_barrier_t start;
	uint64_t *buf;

	if (!rd || !tid || per < 4096)
		goto out;
	buf = mmap(NULL, per * threads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		goto out;
	/* Every page written first: reads of untouched pages would read the zero page. */
	memset(buf, 1, per * threads);
	for (int round = 0; round < rounds; round++) {
		unsigned started = 0;
		uint64_t total = 0;
		double longest = 0;

		pthread_barrier_init(&start, NULL, threads);
		for (unsigned i = 0; i < threads; i++) {
			rd[i] = (struct reader){.p = buf + i * (per / 8),
						.words = per / 8,
						.seconds = seconds,
						.start = &start};
			if (pthread_create(&tid[i], NULL, read_part, &rd[i]))
				break;
			started++;
		}
		if (started < threads) {
			/* The barrier never opens: nothing can be measured. */
			munmap(buf, per * threads);
			free(rd);
			free(tid);
			return -EAGAIN;
		}
		for (unsigned i = 0; i < threads; i++) {
			pthread_join(tid[i], NULL);
			total += rd[i].bytes;
			if (rd[i].elapsed > longest)
				longest = rd[i].elapsed;
		}
		pthread_barrier_destroy(&start);
		if (longest > 0 && (double)total / longest > best)
			best = (double)total / longest;
	}
	munmap(buf, per * threads);
out:
	free(rd);
	free(tid);
	return best;
}

/* CPU time of the whole host (busy, all) from /proc/stat, in clock ticks. */
static bool host_cpu(double *busy, double *all)
{
	unsigned long long v[10] = {0};
	FILE *f = fopen("/proc/stat", "re");
	int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
			   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9])
		  : 0;

	if (f)
		fclose(f);
	if (n < 8)
		return false;
	/* user nice system idle iowait irq softirq steal: guest time is inside user */
	*all = (double)(v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]);
	*busy = *all - (double)(v[3] + v[4]);
	return true;
}

static double self_cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* What identifies this machine's memory system well enough to reuse a measurement. */
static void host_id(char *out, size_t size)
{
	char line[256], model[128] = "unknown";
	FILE *f = fopen("/proc/cpuinfo", "re");
	struct sysinfo si;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
			snprintf(model, sizeof(model), "%s", strchr(line, ':') + 2);
			model[strcspn(model, "\n")] = '\0';
			break;
		}
	if (f)
		fclose(f);
	if (sysinfo(&si) < 0)
		si.totalram = 0, si.mem_unit = 1;
	snprintf(out, size, "%s; %ld CPUs; %llu MiB", model, sysconf(_SC_NPROCESSORS_ONLN),
		 (unsigned long long)si.totalram * si.mem_unit >> 20);
}

static void load_cache(struct lp_membw *m)
{
	char *text = NULL;
	cJSON *doc = NULL, *bps, *host, *fmt, *at;
	FILE *f = fopen(m->cache_path, "re");
	long n;

	if (!f)
		return;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && n < 4096 &&
	    fseek(f, 0, SEEK_SET) == 0 && (text = calloc(1, (size_t)n + 1)) &&
	    fread(text, 1, (size_t)n, f) == (size_t)n)
		doc = cJSON_Parse(text);
	fclose(f);
	free(text);
	fmt = cJSON_GetObjectItemCaseSensitive(doc, "format");
	bps = cJSON_GetObjectItemCaseSensitive(doc, "bytes_per_s");
	host = cJSON_GetObjectItemCaseSensitive(doc, "host");
	at = cJSON_GetObjectItemCaseSensitive(doc, "measured_at");
	if (!cJSON_IsNumber(fmt) || fmt->valuedouble != LP_MEMBW_FORMAT || !cJSON_IsNumber(bps) ||
	    !(bps->valuedouble > 0 && bps->valuedouble < 1e14) || !cJSON_IsString(host)) {
		log_warning("%s: not a bandwidth measurement of this version, ignoring",
			    m->cache_path);
	} else if (strcmp(host->valuestring, m->host)) {
		log_info("%s: measured on other hardware, measuring again when needed",
			 m->cache_path);
	} else {
		m->have = true;
		m->cached = true;
		m->use.bytes_per_s = bps->valuedouble;
		m->use.measured_at = cJSON_IsNumber(at) ? at->valuedouble : 0;
	}
	cJSON_Delete(doc);
}

void lp_membw_init(struct lp_membw *m, const char *state_dir)
{
	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->lock, NULL);
	host_id(m->host, sizeof(m->host));
	if (state_dir && *state_dir && (m->dir = strdup(state_dir)) &&
	    asprintf(&m->cache_path, "%s/%s", state_dir, LP_MEMBW_FILE) > 0)
		load_cache(m);
}

/* The buffer: several times any last-level cache, within a quarter of free memory. */
static uint64_t buffer_size(void)
{
	uint64_t b = 512ULL << 20, llc = 0;
	char buf[64];
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "re");
	struct sysinfo si;

	if (f && fgets(buf, sizeof(buf), f))
		llc = strtoull(buf, NULL, 10) << (strchr(buf, 'M') ? 20 : 10);
	if (f)
		fclose(f);
	if (8 * llc > b)
		b = 8 * llc;
	if (b > (2ULL << 30))
		b = 2ULL << 30;
	if (sysinfo(&si) == 0 && (uint64_t)si.freeram * si.mem_unit / 4 < b)
		b = (uint64_t)si.freeram * si.mem_unit / 4;
	return b;
}

static void *measure_thread(void *arg)
{
	struct lp_membw *m = arg;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN), hz = sysconf(_SC_CLK_TCK);
	unsigned threads = ncpu > 0 ? (unsigned)ncpu : 1;
	uint64_t bytes = buffer_size();
	double busy0 = 0, all0 = 0, busy1 = 0, all1 = 0, self0 = self_cpu(), others = 0, bps;
	bool stat = host_cpu(&busy0, &all0), keep = false;
	cJSON *doc;
	int r;

	bps = lp_membw_measure(threads, bytes, 0.2, 6);
	/* Whatever else ran meanwhile read memory too, or took a CPU from a reader: the figure
	 * is then a lower bound, neither kept nor used to call a decode memory-bound. */
	if (stat && host_cpu(&busy1, &all1) && all1 > all0)
		others = ((busy1 - busy0) - (self_cpu() - self0) * (double)hz) / (all1 - all0);
	pthread_mutex_lock(&m->lock);
	m->threads = threads;
	m->buffer_bytes = bytes;
	m->attempted_ns = lp_now_ns();
	m->running = false;
	m->failed = bps <= 0;
	if (bps > 0) {
		m->tried = true;
		m->last = (struct lp_membw_figure){.bytes_per_s = bps,
						   .measured_at = (double)time(NULL),
						   .others_share = others > 0 ? others : 0,
						   .contended = others > LP_MEMBW_QUIET};
		/* A figure taken under load replaces none taken on quiet CPUs. */
		keep = !m->have || m->use.contended || !m->last.contended;
		if (keep) {
			m->use = m->last;
			m->have = true;
			m->cached = false;
		}
	} else {
		snprintf(m->error, sizeof(m->error), "%s", strerror((int)-bps));
	}
	pthread_mutex_unlock(&m->lock);
	if (bps <= 0) {
		log_warning("memory bandwidth: cannot measure: %s", m->error);
		return NULL;
	}
	log_info("memory bandwidth: %.1f GB/s read by %u threads over %llu MiB%s", bps / 1e9,
		 threads, (unsigned long long)(bytes >> 20),
		 others <= LP_MEMBW_QUIET ? ""
		 : keep ? ", while other work used the CPUs: measuring again when they are quiet"
			: ", while other work used the CPUs: keeping the figure measured on quiet "
			  "CPUs");
	if (!m->dir || others > LP_MEMBW_QUIET)
		return NULL;
	doc = cJSON_CreateObject();
	cJSON_AddNumberToObject(doc, "format", LP_MEMBW_FORMAT);
	cJSON_AddNumberToObject(doc, "bytes_per_s", bps);
	cJSON_AddStringToObject(doc, "host", m->host);
	cJSON_AddNumberToObject(doc, "measured_at", m->last.measured_at);
	cJSON_AddNumberToObject(doc, "threads", threads);
	if ((r = lp_state_write_file(m->dir, LP_MEMBW_FILE, doc)) < 0)
		log_warning("memory bandwidth: cannot keep it in %s: %s, ignoring", m->dir,
			    strerror(-r));
	cJSON_Delete(doc);
	return NULL;
}

static void start(struct lp_membw *m, bool again)
{
	pthread_mutex_lock(&m->lock);
	if (!m->running && (again || !m->have)) {
		if (m->joinable) {
			pthread_join(m->thread, NULL);
			m->joinable = false;
		}
		m->running = true;
		if (pthread_create(&m->thread, NULL, measure_thread, m) == 0) {
			m->joinable = true;
		} else {
			m->running = false;
			m->failed = true;
			snprintf(m->error, sizeof(m->error), "cannot start a thread");
		}
	}
	pthread_mutex_unlock(&m->lock);
}

void lp_membw_want(struct lp_membw *m)
{
	pthread_mutex_lock(&m->lock);
	m->wanted = true;
	pthread_mutex_unlock(&m->lock);
}

void lp_membw_again(struct lp_membw *m)
{
	start(m, true);
}

void lp_membw_tick(struct lp_membw *m)
{
	double busy, all, prev_busy = m->tick_busy, prev_all = m->tick_all;
	uint64_t now = lp_now_ns();
	bool due;

	if (!host_cpu(&busy, &all))
		return;
	m->tick_busy = busy;
	m->tick_all = all;
	/* Quiet since when: a host that was quiet for a while is likely to stay so for the
	 * second or two a measurement takes; one between two runs of a job is not. */
	if (!prev_all || all <= prev_all || (busy - prev_busy) / (all - prev_all) >= LP_MEMBW_QUIET)
		m->quiet_since_ns = 0;
	else if (!m->quiet_since_ns)
		m->quiet_since_ns = now;
	pthread_mutex_lock(&m->lock);
	due = !m->running &&
	      ((!m->have && !m->failed && m->wanted) ||
	       (m->have && m->use.contended && now - m->attempted_ns > LP_MEMBW_RETRY_NS));
	pthread_mutex_unlock(&m->lock);
	/* Measured once the CPUs were quiet for LP_MEMBW_QUIET_NS: a measurement under load
	 * would be low, and would take CPUs and memory from the inference it is to judge. */
	if (due && m->quiet_since_ns && now - m->quiet_since_ns >= LP_MEMBW_QUIET_NS)
		start(m, true);
}

static void render_figure(cJSON *o, const struct lp_membw_figure *f)
{
	cJSON_AddNumberToObject(o, "bytes_per_s", f->bytes_per_s);
	cJSON_AddNumberToObject(o, "measured_at", f->measured_at);
	cJSON_AddNumberToObject(o, "others_cpu_share", f->others_share);
	cJSON_AddBoolToObject(o, "contended", f->contended);
}

void lp_membw_render(struct lp_membw *m, cJSON *o)
{
	pthread_mutex_lock(&m->lock);
	cJSON_AddStringToObject(o, "state",
				m->running  ? "measuring"
				: m->have   ? "measured"
				: m->failed ? "failed"
				: m->wanted ? "waiting_for_quiet_cpus"
					    : "not_measured");
	/* The figure in use, also while a new measurement runs. */
	if (m->have) {
		render_figure(o, &m->use);
		cJSON_AddBoolToObject(o, "cached", m->cached);
	} else {
		cJSON_AddNullToObject(o, "bytes_per_s");
	}
	if (m->tried)
		render_figure(cJSON_AddObjectToObject(o, "last_measurement"), &m->last);
	if (m->threads) {
		cJSON_AddNumberToObject(o, "threads", m->threads);
		cJSON_AddNumberToObject(o, "buffer_bytes", (double)m->buffer_bytes);
	}
	if (m->failed)
		cJSON_AddStringToObject(o, "error", m->error);
	cJSON_AddStringToObject(o, "host", m->host);
	pthread_mutex_unlock(&m->lock);
}

enum lp_membw_state lp_membw_get(struct lp_membw *m, double *bytes_per_s)
{
	enum lp_membw_state s;

	pthread_mutex_lock(&m->lock);
	s = m->have && !m->use.contended ? LP_MEMBW_DONE
	    : m->have			 ? LP_MEMBW_CONTENDED
	    : m->running		 ? LP_MEMBW_MEASURING
	    : m->failed			 ? LP_MEMBW_FAILED
	    : m->wanted			 ? LP_MEMBW_WAITING
					 : LP_MEMBW_NONE;
	*bytes_per_s = s == LP_MEMBW_DONE ? m->use.bytes_per_s : 0;
	pthread_mutex_unlock(&m->lock);
	return s;
}

void lp_membw_free(struct lp_membw *m)
{
	if (m->joinable)
		pthread_join(m->thread, NULL);
	free(m->cache_path);
	free(m->dir);
	pthread_mutex_destroy(&m->lock);
}
