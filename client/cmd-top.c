// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl top: a live view of every LLM process, full-screen (ncurses) or as plain text
 * for pipes (-b), refreshed from the API every --delay seconds. */
#include <curses.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "llmprof/protocol.h"
#include "top.h"

#define MAX_PIDS 64

struct top_opts {
	double delay;
	long iterations; /* 0: until quit */
	bool batch, all, threads, ops, reverse, json;
	bool columns; /* -o chose the layout */
	struct top_layout layout;
	enum top_col sort;
	int pids[MAX_PIDS];
	int npids;
};

/* What one refresh read. */
struct reading {
	struct top_snap snap;
	cJSON *status;
	struct top_host host;
	bool have_host;
};

/* A small file whole, NUL-terminated: its length, or -1. */
static int read_text(const char *path, char *buf, size_t size)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -1;
	n = fread(buf, 1, size - 1, f);
	buf[n] = '\0';
	fclose(f);
	return (int)n;
}

/* The host's load and CPU time, read here: the socket is local, so is the daemon's host. */
static void read_host(struct reading *r)
{
	char stat[8192], load[256];

	r->have_host = read_text("/proc/stat", stat, sizeof(stat)) >= 0 &&
		       read_text("/proc/loadavg", load, sizeof(load)) >= 0 &&
		       top_host_parse(stat, load, &r->host) == 0;
}

static void reading_free(struct reading *r)
{
	top_snap_free(&r->snap);
	cJSON_Delete(r->status);
	r->status = NULL;
}

static bool wanted(const struct top_opts *o, int pid)
{
	for (int i = 0; i < o->npids; i++)
		if (o->pids[i] == pid)
			return true;
	return !o->npids;
}

/* The daemon's status, the list, then each process in full (the histograms' buckets give
 * the interval's percentiles). A process that leaves between the list and its own request
 * is skipped; any other failure ends the read with the exit status and msg. */
static int fetch(struct ctl *c, const struct top_opts *o, struct reading *out, char *msg, size_t n)
{
	cJSON *list = NULL, *doc;
	const cJSON *procs, *p;
	int st;

	memset(out, 0, sizeof(*out));
	st = ctl_request_quiet(c, "GET", LP_ROUTE_STATUS, NULL, &out->status, NULL, msg, n);
	if (!st)
		st = ctl_request_quiet(c, "GET", LP_ROUTE_PROCESSES, NULL, &list, NULL, msg, n);
	if (st) {
		reading_free(out);
		return st;
	}
	procs = cJSON_GetObjectItemCaseSensitive(list, "processes");
	out->snap.docs = calloc((size_t)cJSON_GetArraySize(procs) + 1, sizeof(cJSON *));
	if (!out->snap.docs) {
		cJSON_Delete(list);
		reading_free(out);
		snprintf(msg, n, "out of memory");
		return CTL_DAEMON;
	}
	cJSON_ArrayForEach(p, procs)
	{
		int pid = (int)ctl_num(p, "pid", 0);
		char path[64], ignored[256];

		if ((!o->all && !strcmp(ctl_str(p, "state", ""), "exited")) || !wanted(o, pid))
			continue;
		snprintf(path, sizeof(path), LP_ROUTE_PROCESSES "/%d", pid);
		st = ctl_request_quiet(c, "GET", path, NULL, &doc, NULL, ignored, sizeof(ignored));
		if (st == CTL_NOT_TRACKED || st == CTL_DENIED)
			continue; /* expired, or its pid now belongs to another user */
		if (st) {
			snprintf(msg, n, "%s", ignored);
			cJSON_Delete(list);
			reading_free(out);
			return st;
		}
		out->snap.docs[out->snap.n++] = doc;
	}
	cJSON_Delete(list);
	read_host(out);
	return CTL_OK;
}

/* src cut to 79 characters: the lines above the table fit 80 columns. */
static void fit(char *dst, const char *src)
{
	size_t n = strnlen(src, 79);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* The two lines above the table. */
static void title(const struct top_opts *o, const struct reading *r, bool first, bool paused,
		  char *l1, char *l2)
{
	const cJSON *e, *procs = cJSON_GetObjectItemCaseSensitive(r->status, "processes");
	char up[32], now[16], lost[64] = "", every[32], buf[256];
	time_t t = time(NULL);
	size_t len = 0;

	strftime(now, sizeof(now), "%H:%M:%S", localtime(&t));
	snprintf(buf, sizeof(buf),
		 "llmprofctl top - %s  llmprofd %.16s up %s  %.0f running, %.0f exited", now,
		 ctl_str(r->status, "version", "?"),
		 ctl_fmt_age(up, sizeof(up), ctl_num(r->status, "uptime_seconds", -1)),
		 ctl_num(procs, "running", 0), ctl_num(procs, "exited", 0));
	fit(l1, buf);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r->status, "lost"))
	{
		if (cJSON_IsNumber(e) && e->valuedouble > 0 && len < sizeof(lost))
			len += (size_t)snprintf(lost + len, sizeof(lost) - len, " %s=%.0f",
						e->string, e->valuedouble);
	}
	if (first)
		snprintf(every, sizeof(every), "since tracked");
	else
		snprintf(every, sizeof(every), "every %.1fs", o->delay);
	snprintf(buf, sizeof(buf), "%s%s  sort %s%s  lost:%s", paused ? "[paused]  " : "", every,
		 top_columns[o->sort].name, o->reverse ? " (reversed)" : "",
		 len ? lost : " nothing");
	fit(l2, buf);
}

/* With --ops: the leading ops of a row over its interval. */
static void print_ops(const struct top_opts *o, const struct top_row *r)
{
	struct top_op_row *ops;
	char line[TOP_LINE];
	int n;

	if (!o->ops || (n = top_ops(r, &ops, TOP_OPS_SHOWN)) < 0)
		return;
	for (int k = 0; k < n; k++) {
		top_format_op(line, &ops[k]);
		printf("%s\n", line);
	}
	free(ops);
}

/* The host line: load, CPUs, and the busy CPU split into LLM processes and the rest. */
static void host_line(const struct reading *cur, const struct reading *prev,
		      const struct top_row *rows, size_t n, char *buf)
{
	if (!cur->have_host) {
		snprintf(buf, TOP_LINE, "host  (/proc/stat unreadable)");
		return;
	}
	top_format_host(buf, &cur->host, prev && prev->have_host ? &prev->host : NULL, rows, n);
}

/* One refresh as text: the title, host line and table. */
static void print_table(const struct top_opts *o, const struct reading *cur,
			const struct reading *prev, const struct top_row *rows, size_t n)
{
	char l1[TOP_LINE], l2[TOP_LINE], l3[TOP_LINE], line[TOP_LINE];

	title(o, cur, !prev, false, l1, l2);
	host_line(cur, prev, rows, n, l3);
	top_format_header(line, &o->layout);
	printf("%s%s\n%s\n%s\n\n%s\n", prev ? "\n" : "", l1, l3, l2, line);
	for (size_t j = 0; j < n; j++) {
		struct top_thread_row *t;
		int nt;

		top_format_row(line, &rows[j], &o->layout);
		printf("%s\n", line);
		print_ops(o, &rows[j]);
		if (!o->threads || (nt = top_threads(&rows[j], &t)) < 0)
			continue;
		for (int k = 0; k < nt; k++) {
			top_format_thread(line, &t[k], &o->layout);
			printf("%s\n", line);
		}
		free(t);
	}
}

/* One refresh as a line of JSON (docs/API.md, "llmprofctl --json"): 0, or -ENOMEM. */
static int print_json(const struct top_opts *o, const struct reading *cur,
		      const struct reading *prev, const struct top_row *rows, size_t n)
{
	cJSON *doc = cJSON_CreateObject(), *procs;
	int status;

	if (!doc)
		return -ENOMEM;
	cJSON_AddNumberToObject(doc, "time", (double)time(NULL));
	cJSON_AddBoolToObject(doc, "since_tracked", !prev);
	cJSON_AddStringToObject(doc, "sort", top_columns[o->sort].json);
	cJSON_AddBoolToObject(doc, "reversed", o->reverse);
	if (cur->have_host)
		cJSON_AddItemToObject(doc, "host",
				      top_host_json(&cur->host,
						    prev && prev->have_host ? &prev->host : NULL,
						    rows, n));
	else
		cJSON_AddNullToObject(doc, "host");
	cJSON_AddItemReferenceToObject(doc, "lost",
				       cJSON_GetObjectItemCaseSensitive(cur->status, "lost"));
	procs = cJSON_AddArrayToObject(doc, "processes");
	for (size_t j = 0; procs && j < n; j++)
		cJSON_AddItemToArray(procs, top_row_json(&rows[j], o->threads, o->ops));
	status = procs ? ctl_print_json(doc, true) : CTL_DAEMON;
	cJSON_Delete(doc);
	return status == CTL_OK ? 0 : -ENOMEM;
}

static int batch(struct ctl *c, struct top_opts *o)
{
	struct reading prev = {0}, cur;
	char msg[1024];
	int st = CTL_OK;

	for (long i = 0; !st && (!o->iterations || i < o->iterations); i++) {
		struct top_row *rows;
		size_t n;

		if (i)
			usleep((useconds_t)(o->delay * 1e6));
		st = fetch(c, o, &cur, msg, sizeof(msg));
		if (st) {
			fprintf(stderr, "%s: %s\n", c->prog, msg);
			break;
		}
		if (top_rows(&cur.snap, i ? &prev.snap : NULL, o->all, &rows, &n) < 0) {
			reading_free(&cur);
			st = CTL_DAEMON;
			break;
		}
		top_sort(rows, n, o->sort, o->reverse);
		if (!o->json)
			print_table(o, &cur, i ? &prev : NULL, rows, n);
		else if (print_json(o, &cur, i ? &prev : NULL, rows, n) < 0)
			st = CTL_DAEMON;
		fflush(stdout);
		free(rows);
		reading_free(&prev);
		prev = cur;
	}
	reading_free(&prev);
	return st;
}

/* --- the interactive view --- */

struct screen {
	struct ctl *c;
	struct top_opts *o;
	struct reading prev, cur;
	bool have, first, paused, help, colour;
	struct top_row *rows;
	size_t nrows;
	int sel_pid, top; /* the selected process, and the first row shown */
	char msg[1024];
};

static void rebuild(struct screen *s)
{
	free(s->rows);
	s->rows = NULL;
	s->nrows = 0;
	if (!s->have || top_rows(&s->cur.snap, s->first ? NULL : &s->prev.snap, s->o->all, &s->rows,
				 &s->nrows) < 0)
		return;
	top_sort(s->rows, s->nrows, s->o->sort, s->o->reverse);
}

static void refresh_data(struct screen *s)
{
	struct reading r;
	int st = fetch(s->c, s->o, &r, s->msg, sizeof(s->msg));

	if (st)
		return; /* keep showing the last read, with the reason in the message line */
	s->msg[0] = '\0';
	s->first = !s->have;
	reading_free(&s->prev);
	s->prev = s->cur;
	s->cur = r;
	s->have = true;
	rebuild(s);
}

static int selected(const struct screen *s)
{
	for (size_t i = 0; i < s->nrows; i++)
		if (s->rows[i].pid == s->sel_pid)
			return (int)i;
	return s->nrows ? 0 : -1;
}

static void draw_help(const struct screen *s)
{
	int y = 0;

	erase();
	mvaddstr(y++, 0, "llmprofctl top: keys");
	mvaddstr(y++, 2, "q  quit     h ?  this help (any key returns)    space  pause / resume");
	mvaddstr(y++, 2, "H  threads of the selected process    O  its leading ggml ops");
	mvaddstr(y++, 2, "< >  sort by the shown column to the left / right    R  reverse");
	mvaddstr(y++, 2, "up/down j/k  select    a letter below: sort by its column (shown ones)");
	mvaddstr(y++, 2,
		 "! * + before a PID: a critical, warning or info finding (doctor says "
		 "why)");
	mvaddstr(y++, 0, "columns (over the last interval; the first screen: since tracked)");
	for (int c = 0; c < TC_NR && y < LINES; c++) {
		char line[TOP_LINE];

		snprintf(line, sizeof(line), "%c  %-7s %s",
			 top_columns[c].key ? top_columns[c].key : ' ', top_columns[c].name,
			 top_columns[c].help);
		mvaddnstr(y++, 2, line, COLS - 2);
	}
	(void)s;
	refresh();
}

/* Colour pairs, where the terminal has colours and NO_COLOR is unset. */
enum { PAIR_HEADER = 1, PAIR_CRITICAL, PAIR_WARNING, PAIR_MESSAGE };

static void colour_on(const struct screen *s, int pair, attr_t fallback)
{
	attron(s->colour ? COLOR_PAIR(pair) : fallback);
}

static void colour_off(const struct screen *s, int pair, attr_t fallback)
{
	attroff(s->colour ? COLOR_PAIR(pair) : fallback);
}

/* Column c's cell of line, drawn again at row y with attributes a, as far as the line and
 * the screen hold it (a line ends at its last character: trailing blanks are trimmed). */
static void redraw_cell(const struct screen *s, enum top_col c, const char *line, int y, attr_t a)
{
	int x, w, len = (int)strlen(line);

	if (!top_layout_find(&s->o->layout, c, &x, &w) || x >= COLS || x >= len)
		return;
	w = w < len - x ? w : len - x;
	attron(a);
	mvaddnstr(y, x, line + x, w < COLS - x ? w : COLS - x);
	attroff(a);
}

/* The header, bold (or coloured) apart from the selection, its sort column reversed. */
static void draw_header(const struct screen *s, int y)
{
	char line[TOP_LINE];

	top_format_header(line, &s->o->layout);
	colour_on(s, PAIR_HEADER, A_BOLD | A_UNDERLINE);
	mvaddnstr(y, 0, line, COLS);
	colour_off(s, PAIR_HEADER, A_BOLD | A_UNDERLINE);
	redraw_cell(s, s->o->sort, line, y, A_REVERSE | A_BOLD);
}

/* The cells of figures a finding judged, in its severity's colour (bold without colour). */
static void draw_flags(const struct screen *s, const struct top_row *r, const char *line, int y,
		       bool selected)
{
	for (int c = 0; c < TC_NR; c++) {
		int pair = r->flag[c] == TOP_FLAG_CRITICAL  ? PAIR_CRITICAL
			   : r->flag[c] == TOP_FLAG_WARNING ? PAIR_WARNING
							    : 0;

		if (pair)
			redraw_cell(s, c, line, y,
				    (s->colour ? COLOR_PAIR(pair) | A_BOLD : A_BOLD | A_UNDERLINE) |
					    (selected ? A_REVERSE : 0));
	}
}

static void draw(struct screen *s)
{
	char l1[TOP_LINE], l2[TOP_LINE], l3[TOP_LINE], line[TOP_LINE];
	int sel = selected(s), y, rows_h = LINES - 5;
	struct top_thread_row *t = NULL;
	struct top_op_row *ops = NULL;
	int nt = 0, no = 0;

	if (s->help) {
		draw_help(s);
		return;
	}
	erase();
	if (s->have) {
		title(s->o, &s->cur, s->first, s->paused, l1, l2);
		host_line(&s->cur, s->first ? NULL : &s->prev, s->rows, s->nrows, l3);
		mvaddnstr(0, 0, l1, COLS);
		mvaddnstr(1, 0, l3, COLS);
		mvaddnstr(2, 0, l2, COLS);
	} else {
		mvaddnstr(0, 0, "llmprofctl top", COLS);
	}
	if (!s->o->columns)
		top_layout_fit(&s->o->layout, COLS);
	mvaddnstr(3, 0, "h: help  q: quit  </>: sort  H: threads  O: ops  space: pause", COLS);
	if (s->msg[0]) {
		/* The whole message at the bottom, over as many lines as it takes (at most 4). */
		int lines = ((int)strlen(s->msg) + COLS - 1) / (COLS > 0 ? COLS : 1);

		lines = lines < 1 ? 1 : lines > 4 ? 4 : lines;
		rows_h -= lines;
		colour_on(s, PAIR_MESSAGE, A_BOLD);
		mvaddnstr(LINES - lines, 0, s->msg, lines * COLS);
		colour_off(s, PAIR_MESSAGE, A_BOLD);
	}
	draw_header(s, 4);
	if (sel >= 0) {
		s->sel_pid = s->rows[sel].pid;
		if (s->o->threads && (nt = top_threads(&s->rows[sel], &t)) < 0)
			nt = 0;
		if (s->o->ops && (no = top_ops(&s->rows[sel], &ops, TOP_OPS_SHOWN)) < 0)
			no = 0;
	}
	nt += no; /* the selection's extra rows: its ops, then its threads */
	/* Keep the selection (and its threads, when shown) on the screen. */
	if (sel < s->top)
		s->top = sel < 0 ? 0 : sel;
	else if (rows_h > 0 && sel + 1 + (nt < rows_h - 1 ? nt : 0) > s->top + rows_h)
		s->top = sel + 1 + (nt < rows_h - 1 ? nt : 0) - rows_h;
	y = 5;
	for (int i = s->top; i < (int)s->nrows && y < 5 + rows_h; i++) {
		char mark = s->rows[i].mark;
		int pair = mark == '!' ? PAIR_CRITICAL : mark == '*' ? PAIR_WARNING : 0;

		top_format_row(line, &s->rows[i], &s->o->layout);
		if (pair && s->colour)
			attron(COLOR_PAIR(pair));
		if (i == sel)
			attron(A_REVERSE);
		mvaddnstr(y, 0, line, COLS);
		attroff(A_REVERSE | (pair && s->colour ? COLOR_PAIR(pair) : 0));
		draw_flags(s, &s->rows[i], line, y++, i == sel);
		for (int k = 0; i == sel && k < nt && y < 5 + rows_h; k++) {
			if (k < no)
				top_format_op(line, &ops[k]);
			else
				top_format_thread(line, &t[k - no], &s->o->layout);
			mvaddnstr(y++, 0, line, COLS);
		}
	}
	if (s->have && !s->nrows && y < 5 + rows_h)
		mvaddnstr(y, 0, "  no LLM processes tracked (llmprofctl list shows exited ones)",
			  COLS);
	free(t);
	free(ops);
	refresh();
}

/* The column shown dir steps from col (the first shown when col is not). */
static enum top_col next_shown(const struct top_layout *l, enum top_col col, int dir)
{
	for (int i = 0; i < l->n; i++)
		if (l->col[i] == col)
			return l->col[(i + dir + l->n) % l->n];
	return l->col[0];
}

/* A key; false to quit. */
static bool key(struct screen *s, int ch)
{
	int sel = selected(s);

	if (s->help) {
		s->help = false;
		return ch != 'q';
	}
	switch (ch) {
	case 'q':
	case 'Q':
		return false;
	case 'h':
	case '?':
		s->help = true;
		break;
	case ' ':
		s->paused = !s->paused;
		break;
	case '<':
	case '>':
		s->o->sort = next_shown(&s->o->layout, s->o->sort, ch == '>' ? 1 : -1);
		break;
	case 'R':
		s->o->reverse = !s->o->reverse;
		break;
	case 'H':
		s->o->threads = !s->o->threads;
		break;
	case 'O':
		s->o->ops = !s->o->ops;
		break;
	case KEY_UP:
	case 'k':
		if (sel > 0)
			s->sel_pid = s->rows[sel - 1].pid;
		break;
	case KEY_DOWN:
	case 'j':
		if (sel >= 0 && sel + 1 < (int)s->nrows)
			s->sel_pid = s->rows[sel + 1].pid;
		break;
	default:
		for (int c = 0; c < TC_NR; c++) {
			int x, w;

			if (!top_columns[c].key || top_columns[c].key != ch)
				continue;
			if (top_layout_find(&s->o->layout, c, &x, &w))
				s->o->sort = c;
			else
				snprintf(s->msg, sizeof(s->msg),
					 "%c: %s is not shown at %d columns (a wider terminal or "
					 "-o shows it)",
					 ch, top_columns[c].name, COLS);
		}
		break;
	}
	if (s->have && s->rows)
		top_sort(s->rows, s->nrows, s->o->sort, s->o->reverse);
	return true;
}

static int interactive(struct ctl *c, struct top_opts *o)
{
	struct screen s = {.c = c, .o = o, .sel_pid = -1};
	double next = 0;
	long done = 0;
	int st;

	/* The first read before the screen is taken: if the daemon cannot be reached, say so
	 * on a normal terminal and exit with its status. */
	st = fetch(c, o, &s.cur, s.msg, sizeof(s.msg));
	if (st) {
		fprintf(stderr, "%s: %s\n", c->prog, s.msg);
		return st;
	}
	s.have = s.first = true;
	rebuild(&s);
	next = ctl_now_s() + o->delay;
	done = 1;
	if (!initscr()) {
		fprintf(stderr, "%s: cannot start the terminal (TERM=%s); use -b\n", c->prog,
			getenv("TERM") ? getenv("TERM") : "");
		reading_free(&s.cur);
		free(s.rows);
		return CTL_USAGE;
	}
	/* Colour where the terminal has it, unless NO_COLOR (no-color.org) is set. */
	s.colour = has_colors() && !(getenv("NO_COLOR") && *getenv("NO_COLOR"));
	if (s.colour) {
		start_color();
		use_default_colors();
		init_pair(PAIR_HEADER, COLOR_BLACK, COLOR_CYAN);
		init_pair(PAIR_CRITICAL, COLOR_RED, -1);
		init_pair(PAIR_WARNING, COLOR_YELLOW, -1);
		init_pair(PAIR_MESSAGE, COLOR_RED, -1);
	}
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	for (;;) {
		double left;
		int ch;

		draw(&s);
		if (o->iterations && done >= o->iterations)
			break;
		left = next - ctl_now_s();
		timeout(left > 0 ? (int)(left * 1000) + 1 : 0);
		ch = getch();
		if (ch != ERR && ch != KEY_RESIZE && !key(&s, ch))
			break;
		if (ctl_now_s() >= next) {
			if (!s.paused) {
				refresh_data(&s);
				done++;
			}
			next = ctl_now_s() + o->delay;
		}
	}
	endwin();
	reading_free(&s.prev);
	reading_free(&s.cur);
	free(s.rows);
	return CTL_OK;
}

static const struct option opts[] = {{"delay", required_argument, NULL, 'd'},
				     {"batch", no_argument, NULL, 'b'},
				     {"iterations", required_argument, NULL, 'n'},
				     {"sort", required_argument, NULL, 's'},
				     {"all", no_argument, NULL, 'a'},
				     {"threads", no_argument, NULL, 'H'},
				     {"ops", no_argument, NULL, 'O'},
				     {"pid", required_argument, NULL, 'p'},
				     {"columns", required_argument, NULL, 'o'},
				     {"json", no_argument, NULL, 'j'},
				     CTL_COMMON_OPTS};

static int parse_sort(struct ctl *c, const char *s, enum top_col *out)
{
	for (int i = 0; i < TC_NR; i++)
		if (!strcasecmp(s, top_columns[i].name)) {
			*out = i;
			return 0;
		}
	return ctl_usage_error(c, &ctl_cmd_top,
			       "--sort wants a column name as in the header (PID, CPU%%, TOK/S, "
			       "MS99, RQ99, ...), not '%s'",
			       s);
}

static int exec(struct ctl *c, int argc, char **argv)
{
	struct top_opts o = {.delay = 2, .sort = TC_CPU};
	int opt, status = CTL_OK, pid;
	char bad[40];

	while ((opt = ctl_getopt(c, &ctl_cmd_top, argc, argv, &status)) != -1) {
		switch (opt) {
		case -2:
			return status;
		case 'd':
			if (ctl_parse_seconds(c, &ctl_cmd_top, "--delay", optarg, 0.1, 3600,
					      &o.delay))
				return CTL_USAGE;
			break;
		case 'b':
			o.batch = true;
			break;
		case 'n':
			if (ctl_parse_count(c, &ctl_cmd_top, "--iterations", optarg, 1, 1000000000,
					    &o.iterations))
				return CTL_USAGE;
			break;
		case 's':
			if (parse_sort(c, optarg, &o.sort))
				return CTL_USAGE;
			break;
		case 'a':
			o.all = true;
			break;
		case 'H':
			o.threads = true;
			break;
		case 'O':
			o.ops = true;
			break;
		case 'j':
			o.json = o.batch = true;
			break;
		case 'o':
			if (top_layout_parse(optarg, &o.layout, bad, sizeof(bad)) < 0)
				return ctl_usage_error(
					c, &ctl_cmd_top,
					"-o: unknown column '%s' (pid, comm, thr, cpu, toks, "
					"wtoks, ms50, ms99, mm, spin, ftxs, ftx99, rq99, majs, "
					"model, workload)",
					bad);
			o.columns = true;
			break;
		case 'p':
			if (ctl_parse_pid(c, &ctl_cmd_top, optarg, &pid))
				return CTL_USAGE;
			if (o.npids == MAX_PIDS)
				return ctl_usage_error(c, &ctl_cmd_top, "at most %d --pid",
						       MAX_PIDS);
			o.pids[o.npids++] = pid;
			break;
		}
	}
	/* Like top: without a terminal, plain text, 80 columns unless $COLUMNS says more. */
	if (o.batch || !isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
		const char *cols = getenv("COLUMNS");

		if (!o.columns)
			top_layout_fit(&o.layout, cols && atoi(cols) > 80 ? atoi(cols) : 80);
		return batch(c, &o);
	}
	return interactive(c, &o);
}

const struct ctl_cmd ctl_cmd_top = {
	.name = "top",
	.usage = "[-b | --json] [-n N] [-d SECONDS] [-s COLUMN] [-o COLUMNS] [-a] [-H] [-O] "
		 "[-p PID]...",
	.summary = "live view of every LLM process (plain text with -b)",
	.help = "One row per LLM process: CPU, tokens/s and ms per token, the share of matmul and "
		"of barrier\nspinning, futex waits, run-queue latency and major faults, over the "
		"last interval (the\nfirst screen: since each process was tracked). Fits 80 "
		"columns; a wider terminal\n(or $COLUMNS with -b) adds WTOK/S, MODEL and "
		"WORKLOAD. Above the table: the host's\nload, CPUs, and its busy CPU split into "
		"the LLM processes' and everything else's.\n\n"
		"Options:\n"
		"  -d, --delay SECONDS    refresh interval (default 2)\n"
		"  -b, --batch            plain text, one table per refresh (also when output is "
		"not a terminal)\n"
		"  -j, --json             as -b, each refresh as one line of JSON: every column "
		"with\n"
		"                         its unit in its name, null where the table prints '-'\n"
		"                         (docs/API.md, \"llmprofctl --json\")\n"
		"  -n, --iterations N     stop after N tables\n"
		"  -s, --sort COLUMN      sort by the column with this header (default CPU%)\n"
		"  -a, --all              include exited processes, as [name]\n"
		"  -H, --threads          per-thread rows (interactive: for the selected process)\n"
		"  -O, --ops              the 5 leading ggml ops of each process, share of its\n"
		"                         samples in the interval (interactive: the selected one)\n"
		"  -p, --pid PID          only this process (repeatable)\n"
		"  -o, --columns LIST     these columns, in this order, as ps -o: pid, comm, thr,\n"
		"                         cpu, toks, wtoks, ms50, ms99, mm, spin, ftxs, ftx99, "
		"rq99,\n"
		"                         majs, model, workload, reqs, ttft99, tpot99, occ\n\n"
		"Keys: q quit, h help, space pause, < > sort column, R reverse, H threads, O ops,\n"
		"      up/down select; p n c t l m b f r g w M W e sort by PID COMMAND CPU% TOK/S\n"
		"      MS99 MM% SPIN% FTX/S RQ99 MAJ/S WTOK/S MODEL WORKLOAD REQ/S.\n\n"
		"Columns:\n"
		"  THR threads; CPU% of one CPU; TOK/S decode tokens/s: generated tokens per\n"
		"  second inside llama_decode; WTOK/S wall tokens/s: per second of elapsed time,\n"
		"  sampling and the application's own work between tokens included;\n"
		"  MS50 MS99 ms per generated token, median and p99; MM% SPIN% CPU samples in\n"
		"  matmul and in barrier functions (MM% 'n?': the stack scan placed the samples,\n"
		"  not to be trusted; dump says why); FTX/S futex waits per second and FTX99 "
		"their\n"
		"  p99 (for a process generating tokens, of the waits inside its generation\n"
		"  decodes: its threads idle between requests wait seconds at no cost to a "
		"token);\n"
		"  RQ99 run-queue latency p99; MAJ/S major page faults per second.\n"
		"  REQ/S TTFT99 TPOT99 OCC (with -o, or on a terminal wide enough): requests over\n"
		"  per second, their time to first token and per output token p99, and the\n"
		"  sequences a decode carried, from llama_decode's batches (llmprofctl requests).\n"
		"  A mark before the PID flags the worst finding: ! critical, * warning, + info;\n"
		"  one that fired in the last 10 s keeps its mark (`llmprofctl doctor --pid PID`\n"
		"  says what and why, and lists it as recent); interactively the figure it\n"
		"  judged (RQ99 for preempted or oversubscribed, SPIN% for late_thread or\n"
		"  omp_wait_policy, MAJ/S for weights_not_resident) is red or yellow, and the\n"
		"  sort column's heading reversed. Sort keys act on the columns shown.\n"
		"  COMMAND widens to a whole name where the terminal has room.\n"
		"  Thread rows (-H) show what a thread has: CPU%, SPIN% (its samples in sync),\n"
		"  FTX/S and MAJ/S; a row '- (exited)' holds what threads that exited during the\n"
		"  interval took, so that the rows add up to the process.\n"
		"  Colour where the terminal has it; NO_COLOR=1 turns it off.\n\n"
		"Examples:\n"
		"  llmprofctl top\n"
		"  llmprofctl top -b -n 3 -d 5 -s RQ99 > top.txt\n"
		"  llmprofctl top --json -n 1 | jq '.processes[] | {pid, cpu_percent}'\n",
	.shortopt = "d:bn:s:aHOp:o:j",
	.longopts = opts,
	.exec = exec,
};
